"""The study: what a sweep stored and how it is run, between search (pure proposals) and the layers that read
or drive studies (results, profile, fleet, workflows). Optuna's storage lives here.

The read-only judgements over stored trials (confidence, noise, verdict) are here, not in workflows: results
ranks with confidence.py's intervals and ties, the CLI prints verdict.py's sweep verdict, and workflows choose
repeats from noise.py's floor; all three read only what a study stored, so results stays below workflows.

- confidence.py a trial's 95% CI, ties with #1 (Welch, else overlap), repeats to detect a change (pure)
- lock.py       the schema lock (a PostgreSQL advisory lock around creating Optuna's tables)
- noise.py      the noise floor: variance components over launches, in-launch repeats against fresh launches
- objective.py  the objective around one trial: dedupe, the reference gate, the run, retries, the budget
- provenance.py where numbers came from: versions, engine, model, GPU
- record.py     a TrialOutcome -> objective values, constraints and user attrs (pure)
- recovery.py   servers a dead controller left, found by the launch intents the study holds (run token)
- reference.py  how the reference outputs are chosen (a file, a seed, two agreeing configs)
- resume.py     a study remembers its space; resuming under an edited one is refused
- runs.py       running a study: the sweep, a queue of given configs, recovery of interrupted trials
- storage.py    the study database: SQLite (WAL, retried short attempts) or PostgreSQL
- store.py      create, load and list studies; their space, host and controller; the engine's flags
- stored.py     the one reader of what a study stored: its space, reference output, rejections, objective
- trials.py     which stored trials count: evaluations, feasibility, the Pareto front, the best
- verdict.py    how a run of trials ended (its last line and exit code): measured, ranked, why the rest failed
- warm.py       warm start: configs and reference outputs from earlier studies
"""
