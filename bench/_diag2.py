import sys
from pathlib import Path
from surfaces import family, optimum
from model_search import simulate_search
from sweeper.spec.space import load_space
from sweeper.search.samplers import build_sampler
from sweeper.search.local import LocalSearchSampler
from sweeper.search.samplers import tpe_sampler
space = load_space(Path("../search_spaces/demo-sim.yaml"))
s = family(space, [sys.argv[1]])[0]
best, _, _ = optimum(space, s)
model = sys.argv[2] == "1"
for seed in range(int(sys.argv[3])):
    for use in (True, False):
        sam = LocalSearchSampler(space, tpe_sampler(36, seed), seed=seed, model=model)
        tr = simulate_search(space, sam, 40, use_seeds=use, surface=s, noise_seed=seed)
        first = tr.crashed.index(False) if False in tr.crashed else None
        print(seed, use, "first feasible", first, "crashes", tr.crashes, "best@20 %.3f @36 %.3f @40 %.3f" % (tr.best_by_evaluation[19]/best, tr.best_by_evaluation[35]/best, tr.best_by_evaluation[-1]/best), flush=True)
