"""What the user wrote, typed and checked: the first stage of the pipeline.

- yamlfile.py  YAML reading that remembers each key's line
- loading.py   Strict base model; YAML -> model with errors naming file, line and key path
- expr.py      constraint / rule / derived expressions, parsed safely (no eval)
- rules.py     a config against the space's static rules and constraints (what preflight refuses)
- hosts.py     hosts.yaml: HostSpec, load_hosts, load_host
- space.py     search-space files: parameters, derived, rules, workload, objectives, gate; load_space
- datasets.py  dataset files (ShareGPT, JSONL) and length distributions: records sent verbatim
- engine_traits.py what a space is checked against per engine (request API, parallel-size flags)
"""
