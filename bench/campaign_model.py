"""The campaign's policy on the simulator's MODEL instead of launched servers (seconds, not the
~7 minutes a seed of bench/campaign.py takes): the sweep through bench/model_search.py's plumbing,
then the campaign's own adaptive validation (sweeper/workflows/validation.py's plan_validation) with
a fresh noisy measurement per launch. For choosing the split of launches and the finalists' rule;
bench/campaign.py then confirms the choice with real servers.

    cd bench && PYTHONPATH=.. ../.venv/bin/python campaign_model.py [--seeds 40] [--noise 0.05] [--sampler auto model] [--sweep 26 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import warnings
from pathlib import Path

from model_search import simulate_search
from surfaces import sim
from sweeper.workflows.ablation import Measured
from sweeper.search.samplers import build_sampler
from sweeper.study.trials import ranked_trials
from sweeper.workflows.validation import plan_validation
from sweeper.spec.space_file import load_space

warnings.filterwarnings("ignore")
SPACE = Path(__file__).with_name("campaign-sim.yaml")


def campaign(space, surface, seed: int, sweep: int, launches: int, finalists: int, repeats: int,
             max_repeats: int, sampler: str = "auto") -> dict:
    trace = simulate_search(space, build_sampler(space, sweep, sampler, seed), sweep, surface=surface,
                            noise_seed=seed)
    study = trace.study
    ranked = ranked_trials(study)
    params = {f"trial {t.number}": dict(t.params) for t in ranked}
    candidates = [(f"trial {t.number}", t.values[0]) for t in ranked]
    rng = random.Random(f"validate-{seed}")
    runs: list[Measured] = []
    queue = [label for _ in range(repeats) for label, _ in candidates[:finalists]]
    used = len(trace.best_by_evaluation)
    while True:
        for label in queue:
            runs.append(Measured(label, surface.measure(params[label], rng)))
            used += 1
        plan = plan_validation(runs, candidates, True, max_repeats, launches - used, None)
        if not plan.runs:
            break
        queue = plan.runs
    winner = plan.verdict["winner"]
    naive = ranked[0]
    measured_best = max(surface.value(t.params) or 0.0 for t in study.get_trials() if t.values)
    return {"winner": surface.value(params[winner]), "naive": surface.value(naive.params),
            "best_measured": measured_best, "crashes": trace.crashes, "launches": used, "tie": plan.verdict["tie"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--sampler", nargs="*", default=["auto"])
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--sweep", type=int, nargs="*", default=[26])
    parser.add_argument("--launches", type=int, default=40)
    parser.add_argument("--finalists", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-repeats", type=int, default=6)
    args = parser.parse_args()
    space = load_space(SPACE)
    surface = sim(space, noise=args.noise)
    from surfaces import optimum
    best, near, allowed = optimum(space, surface)
    print(f"optimum {best:.3f}; {near} of {allowed} allowed configs within 2%")
    for sampler, sweep in ((name, n) for name in args.sampler for n in args.sweep):
        rows = [campaign(space, surface, s, sweep, args.launches, args.finalists, args.repeats, args.max_repeats,
                         sampler) for s in range(args.seeds)]
        within = lambda key: sum(r[key] is not None and r[key] >= 0.98 * best for r in rows)  # noqa: E731
        print(f"{sampler}, sweep {sweep}: campaign {within('winner')}/{len(rows)}, naive {within('naive')}, "
              f"sweep measured one {within('best_measured')}, launches max {max(r['launches'] for r in rows)}, "
              f"ties {sum(r['tie'] for r in rows)}, median winner ratio "
              f"{statistics.median((r['winner'] or 0) / best for r in rows):.3f}")


if __name__ == "__main__":
    main()
