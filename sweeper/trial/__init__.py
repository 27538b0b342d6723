"""One trial on one host: preflight -> launch -> wait_ready -> check_output -> load ladder -> stop.

- pipeline.py   run_trial: the launched server's output checked, its ladder measured
- launch.py     the one launch path (launched_server): preflight, gate, launch, readiness, always the stop
- load_ladder.py the trial's hooks on loadgen's level loop: sample files, watchdog, level verdicts
- context.py    TrialContext, TrialOutcome and Failure: what the stages share
- gate.py       the output-correctness gate: greedy samples judged against the study's reference
- garbage.py    a garbage detector for greedy text while no reference exists
- energy.py     GPU energy of the load: power.draw sampled on the server's GPUs during a level
- native.py     `workload.load: native`: each level measured by the engine's own benchmark
"""
