"""The search: which config to launch next, and what the launches taught us (Optuna lives here).

- configs.py   a space -> Optuna suggestions, derived values, enumeration, canonical keys
- samplers.py  which sampler a study uses (`auto`: brute force when small, else local.py)
- local.py     the default search on large spaces: single-lever moves from the incumbent ranked by a pooled
               additive model (then pairs, runners-up), space-filling while nothing is feasible,
               interleaved with TPE; each trial's `proposed_by`
- study.py     storage, the objective around a trial, dedupe, budget, retries, resume recovery
- record.py    a TrialOutcome -> objective values, constraints and user attrs (pure)
- trials.py    which stored trials count: evaluations, feasibility, the Pareto front, the best
- pareto.py    dominance and the front (pure)
- resume.py    a study remembers its space; resuming under an edited one is refused
- ablation.py  one lever at a time from a baseline, and finalist re-validation (pure)
- stored.py    the one reader of what a study stored: its space, reference output, rejections, objective
- reference.py how the reference outputs are chosen (a file, a seed, two agreeing configs)
- doctor.py    `sweeper doctor`: every check a sweep of a space on a host needs, without a launch
"""
