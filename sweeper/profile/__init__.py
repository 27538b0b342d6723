"""Kernel profiles of a config: `sweeper profile STUDY --trial N | --best`.

- groups.py   the kernel -> group classification rules, as data (attention, MoE/GEMM, communication, other)
- trace.py    pure parser of torch profiler chrome traces: kernel_shares, group_shares
- control.py  how each engine's torch profiler is switched on (env at launch, HTTP start/stop)
- fetch.py    list and copy trace files from a host (local or SSH) through Host.run only
- run.py      the pipeline: preflight, launch, wait_ready, profile under load, fetch, stop
- outputs.py  the saved record (profile.json) and the text table (profile.txt)
- command.py  `sweeper profile` and the campaign's profile of a study's trial: the config, the host, the run
"""
