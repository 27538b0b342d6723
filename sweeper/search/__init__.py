"""The search: which config to launch next (pure proposal; the study that stores the answers is sweeper/study/).

- configs.py   a space -> Optuna suggestions, derived values, enumeration, canonical keys, lever values
- samplers.py  which sampler a study uses (`auto`: brute force when small, else gp.py)
- local_search.py the proposal plumbing every non-Optuna search shares (plans, taken configs, each
               trial's `proposed_by`) and `local`: single-lever moves from the incumbent, then pairs
- gp.py        the default search on large spaces: a GP over the levers, expected improvement around
               its best estimates times a learnt chance to run
- model.py     `model`: an additive model's Thompson draws; per-value crash odds (pure)
- pareto.py    dominance and the front (pure)
"""
