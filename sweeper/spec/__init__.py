"""What the user wrote, typed and checked: the first stage of the pipeline.

- yamlfile.py  YAML reading that remembers each key's line
- loading.py   Strict base model; YAML -> model with errors naming file, line and key path
- expr.py      constraint / rule / derived expressions, parsed safely (no eval)
- rules.py     a config against the space's static rules and constraints (what preflight refuses)
- hosts.py     hosts.yaml: HostSpec, load_hosts, load_host
- params.py    search-space parameters (categorical, int, float, bool, derived) and a seed value's fit
- space.py     search-space models: rules, workload, objectives, gate, the Space; space_fingerprint
- space_checks.py a space's checks across keys (conditions, expressions, seeds, objectives vs the ladder)
- space_file.py a space file read: parse_space, load_space (YAML -> checked Space, workload paths)
- datasets.py  dataset files (ShareGPT, JSONL) and length distributions: records sent verbatim
- engine_traits.py what a space is checked against per engine (request API, parallel-size flags)
- engine_ports.py the ports an engine's argv binds (flag values, SGLang's internal ports); stdlib only
"""
