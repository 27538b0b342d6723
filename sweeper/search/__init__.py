"""The search: which config to launch next, and what the launches taught us (Optuna lives here).

- configs.py   a space -> Optuna suggestions, derived values, enumeration, canonical keys
- samplers.py  which sampler a study uses (`auto`: brute force when small, else gp.py)
- local.py     the proposal plumbing every non-Optuna search shares (plans, taken configs, each
               trial's `proposed_by`) and `local`: single-lever moves from the incumbent, then pairs
- gp.py        the default search on large spaces: a GP over the levers, expected improvement around
               its best estimates times a learnt chance to run
- model.py     `model`: an additive model's Thompson draws; per-value crash odds (pure)
- study.py     storage, the objective around a trial, dedupe, budget, retries, resume recovery
- record.py    a TrialOutcome -> objective values, constraints and user attrs (pure)
- trials.py    which stored trials count: evaluations, feasibility, the Pareto front, the best
- pareto.py    dominance and the front (pure)
- resume.py    a study remembers its space; resuming under an edited one is refused
- leftovers.py servers a dead controller left, found by the launch intents the study holds (run token)
- ablation.py  one lever at a time from a baseline, and finalist re-validation (pure)
- confidence.py a trial's 95% CI, ties with #1 (Welch, else overlap), repeats to detect a change (pure)
- stored.py    the one reader of what a study stored: its space, reference output, rejections, objective
- reference.py how the reference outputs are chosen (a file, a seed, two agreeing configs)
- doctor.py    `sweeper doctor`: every check a sweep of a space on a host needs, without a launch
"""
