"""One trial on one host: preflight -> launch -> wait_ready -> check_output -> load ladder -> stop.

- pipeline.py   the stages and run_trial; a TrialOutcome (levels, or a Failure with its stage)
- gate.py       the output-correctness gate: greedy samples judged against the study's reference
- garbage.py    a garbage detector for greedy text while no reference exists
"""
