"""One trial on one host: preflight -> launch -> wait_ready -> check_output -> load ladder -> stop.

- pipeline.py   the stages and run_trial; a TrialOutcome (levels, or a Failure with its stage)
- gate.py       the output-correctness gate: greedy samples judged against the study's reference
- reference.py  how the study's reference outputs are chosen (a file, a seed, two agreeing configs)
- garbage.py    a garbage detector for greedy text while no reference exists
"""
