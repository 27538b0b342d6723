"""Issue 29's campaign, read back: every fresh launch of each config at the objective's level (the
sweep's launch and the validation's), their in-launch repeats, and the variance components per
config and pooled (sweeper.study.noise, the estimator the campaign itself uses).

    python3 bench/gpu/vllm/campaign_table.py RESULTS_DIR STUDY      (RESULTS_DIR: study.tar.gz unpacked)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from optuna.trial import TrialState

from sweeper.levels import level_key
from sweeper.study.noise import pooled_noise, variance_components
from sweeper.study.store import load_study


def launches(results: Path, study: str, level: str) -> dict[str, list[tuple[str, list[float]]]]:
    """config label -> (where, in-launch repeats) of each completed launch, the sweep's first."""
    sweep = load_study(study, results, None)
    params = {f"trial {t.number}": t.params for t in sweep.trials}
    out: dict[str, list[tuple[str, list[float]]]] = {label: [] for label in params}
    runs = [(f"trial {t.number}", f"sweep trial {t.number}", t) for t in sweep.trials]
    validation = results / f"{study}-validate"
    if validation.is_dir():
        runs += [(t.user_attrs.get("label"), f"validation run {t.number}", t)
                 for t in load_study(f"{study}-validate", results, None).trials]
    for label, where, trial in runs:
        metrics = (trial.user_attrs.get("levels") or {}).get(level) or {}
        repeats = metrics.get("repeat_output_throughputs") or ([metrics["output_throughput"]] if "output_throughput" in metrics else [])
        if trial.state == TrialState.COMPLETE and repeats:
            out.setdefault(label, []).append((where, [float(v) for v in repeats]))
    return {f"{label} ({', '.join(f'{k}={v}' for k, v in params.get(label, {}).items())})": v for label, v in out.items()}


def main() -> None:
    results, study = Path(sys.argv[1]), sys.argv[2]
    level = level_key(int(sys.argv[3])) if len(sys.argv) > 3 else "128"
    by_config = launches(results, study, level)
    print(f"| config | launch | in-launch repeats (tok/s) | launch mean |\n|---|---|---|---:|")
    for config, runs in by_config.items():
        for where, repeats in runs:
            print(f"| {config} | {where} | {' / '.join(f'{v:,.0f}' for v in repeats)} | {statistics.fmean(repeats):,.0f} |")
    print("\n| config | launches | mean tok/s | CV of launch means | between-launch CV | within-launch CV |\n|---|---:|---:|---:|---:|---:|")
    for config, runs in by_config.items():
        means = [statistics.fmean(r) for _, r in runs]
        if len(means) < 2:
            continue
        cv = statistics.stdev(means) / statistics.fmean(means)
        parts = variance_components([r for _, r in runs]) if all(len(r) >= 2 for _, r in runs) else None
        print(f"| {config} | {len(runs)} | {statistics.fmean(means):,.0f} | {cv:.1%} | "
              f"{'' if parts is None else f'{parts.between_cv:.1%}'} | {'' if parts is None else f'{parts.within_cv:.1%}'} |")
    floor = pooled_noise({c: [r for _, r in runs] for c, runs in by_config.items()}, level)
    print(f"\npooled over configs: between-launch CV {floor.between_cv or 0:.1%}, within-launch CV "
          f"{floor.within_cv or 0:.1%} ({floor.launches} launches)")


if __name__ == "__main__":
    main()
