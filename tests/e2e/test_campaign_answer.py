"""One answer everywhere: after a campaign that ends in a tie, `best --json`, `leaderboard --json`
and `--csv`, the report and serve-winner.sh name the same winner with the same 95% CI and the same
tie, validated configs rank above the sweep's single runs, and the validation's progress lines
name the sweep trial each run re-measures.

The tie is forced, not hoped for: with --finalists 1 the sweep's best is re-run twice, the
runner-up of the sweep joins with one run (a lone finalist cannot be separated from anything),
and one run cannot be told apart from any mean (Welch needs two), so when the first finalist
reaches --max-repeats 3 the campaign declares a tie, whichever of the two has the higher mean."""

from __future__ import annotations

import csv
import json
import re

import optuna
import pytest

from sweeper.results.report_data import build_report_data
from sweeper.study.trials import ranked_trials
from tests.support.spaces import CAMPAIGN_SPACE

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_a_tied_campaign_gives_one_winner_ci_and_tie_everywhere(cli):
    (cli.workdir / "camp.yaml").write_text(CAMPAIGN_SPACE)
    result = cli.run("campaign", "camp.yaml", "--study", "tie", "--finalists", "1", "--repeats", "2",
                     "--max-repeats", "3", "--seed", "3", timeout=800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    out = result.stdout
    study = optuna.load_study(study_name="tie", storage=f"sqlite:///{cli.workdir}/results/tie/study.db")
    summary = study.user_attrs["campaign_summary"]
    assert summary["tie"] is True and len(summary["tied_with"]) == 1, summary
    winner, tied = summary["winner"]["trial"], [int(str(t).split()[-1]) for t in summary["tied_with"]]  # "trial 6" or 6
    low = summary["winner"]["mean"] - summary["winner"]["ci95"]
    high = summary["winner"]["mean"] + summary["winner"]["ci95"]

    # best --json: the campaign's winner, its validated CI, the tie
    best = json.loads(cli.run("best", "tie", "--json").stdout)
    assert (best["trial"], best["validated"], best["tied_with"]) == (winner, True, tied), best
    assert (best["ci_low"], best["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert best["launches"] == summary["winner"]["runs"] - summary["winner"]["failed"] and best["why"] == summary["why"]

    # leaderboard --json and --csv: the same #1, CI and tie set; validated configs above unvalidated ones
    board = json.loads(cli.run("leaderboard", "tie", "--json", "--csv", "board.csv").stdout)
    ranked = [row for row in board if row["rank"] is not None]
    top = ranked[0]
    assert (top["trial"], top["validated"]) == (winner, True)
    assert (top["ci_low"], top["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert [row["trial"] for row in ranked[1:] if row["tied_with_best"]] == tied
    validated = [row["validated"] for row in ranked]
    assert validated == sorted(validated, reverse=True), ranked  # no single run above a validated mean
    with open(cli.workdir / "board.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["rank"]]
    assert (int(rows[0]["trial"]), rows[0]["validated"]) == (winner, "True")
    assert [int(row["trial"]) for row in rows[1:] if row["tied_with_best"] == "True"] == tied
    table = cli.run("leaderboard", "tie").stdout
    assert "tied with #1" in table

    # the report: its data's answer, its table's #1 and its sentence
    data = build_report_data(study)
    assert (data.answer.trial, data.answer.tied_with, data.top[0].trial) == (winner, tied, winner)
    assert (data.answer.ci_low, data.answer.ci_high) == (pytest.approx(low), pytest.approx(high))
    report = (cli.workdir / "results/tie/report.md").read_text()
    assert (f"The top is a tie: trial {tied[0]} cannot be told apart from #1 (trial {winner}): the campaign "
            "could not separate them") in report

    # serve-winner.sh: the validated mean and CI, the launches, the tie
    script = (cli.workdir / "results/tie/serve-winner.sh").read_text()
    header = "\n".join(line for line in script.splitlines() if line.startswith("#"))
    assert f"best of study tie, trial {winner}: " in header
    assert f"validated mean of {best['launches']} fresh launch" in header
    assert f"95% CI {best['ci_low']:,.2f}-{best['ci_high']:,.2f}" in header
    assert f"tied with trial {tied[0]}: the campaign could not separate them" in header

    # the validation's lines name the sweep trial each run re-measures, not the validate study's numbers
    validating = out[out.index("campaign phase: validate"):out.index("campaign phase: profile")]
    started = re.findall(r"\d\d:\d\d:\d\d (.*?) \(evaluation (\d+) of \d+\)", validating)
    first, second = [t.number for t in ranked_trials(study)[:2]]  # the sweep's best, and the one that joined
    assert {first, second} == {winner, tied[0]}
    assert started == [(f"sweep trial {first}", "1"), (f"sweep trial {first}", "2"), (f"sweep trial {first}", "3"),
                       (f"sweep trial {second}", "4")], started
