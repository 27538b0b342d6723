"""Every surface reads one ranked frame: each ranked value's 95% CI, where it came from, the tie
with #1 and the imprecise flag, in the leaderboard table, exports, show, best --json and the
report. The expected numbers come from scipy.stats directly."""

import math

import pandas as pd
import pytest
from rich.console import Console
from scipy import stats

from sweeper.results.export import build_export_frame
from sweeper.results.ranking import ranked_frame
from sweeper.results.report_data import build_report_data
from sweeper.results.report_sections import build_top_section
from sweeper.results.show import build_best_record, build_show_record
from sweeper.results.table import format_leaderboard_table
from sweeper.workflows.ablation import Measured, summarize_finalists
from sweeper.trial.context import TrialOutcome
from tests.support.studies import level, make_study, record


def precise(tok_s, low, high, batches=None, reached=True):
    keys = {"output_throughput_ci_low": low, "output_throughput_ci_high": high, "precision_reached": reached}
    return {**level(tok_s), **keys, **({"batches": batches} if batches else {})}


def batch_stats(low, high, batches):
    """The spread of one batch mean that a t interval over `batches` of them implies."""
    return (high - low) / 2 * math.sqrt(batches) / stats.t.ppf(0.975, batches - 1)


@pytest.fixture
def study():
    study = make_study()
    study.set_user_attr("reference_text", "Paris")
    for levels in (precise(100.0, 98.0, 102.0, batches=8),  # 0: the best
                   precise(99.0, 97.0, 101.0, batches=8),  # 1: inside #1's noise (Welch)
                   precise(80.0, 79.0, 81.0, batches=8),  # 2: clearly worse
                   level(95.0),  # 3: one measurement, no interval
                   precise(97.0, 90.0, 104.0, reached=False)):  # 4: imprecise, only an interval
        record(study, {}, TrialOutcome({}, levels={1: level(10.0), 16: levels}, output_text="Paris", launched=True))
    return study


def test_the_ranked_frame_carries_cis_and_welch_or_overlap_ties(study):
    frame = ranked_frame(study).set_index("trial")
    best_sd, other_sd = batch_stats(98.0, 102.0, 8), batch_stats(97.0, 101.0, 8)
    p = stats.ttest_ind_from_stats(100.0, best_sd, 8, 99.0, other_sd, 8, equal_var=False).pvalue
    assert p >= 0.05 and frame.loc[1, "tied_with_best"] is True and frame.loc[1, "tie_rule"] == "welch"
    assert stats.ttest_ind_from_stats(100.0, best_sd, 8, 80.0, batch_stats(79.0, 81.0, 8), 8,
                                      equal_var=False).pvalue < 0.05
    assert frame.loc[2, "tied_with_best"] is False
    assert frame.loc[4, "tied_with_best"] is True and frame.loc[4, "tie_rule"] == "overlap"  # [90, 104] meets [98, 102]
    assert frame.loc[4, "precision_reached"] is False
    assert frame.loc[3, "tied_with_best"] is None and math.isnan(frame.loc[3, "ci_low"])  # unknown, never precise
    assert (frame.loc[0, "ci_low"], frame.loc[0, "ci_high"], frame.loc[0, "ci_source"]) == (98.0, 102.0, "precision")


def test_table_show_best_exports_and_report_say_the_top_is_a_tie(study):
    console = Console(width=250, record=True)
    console.print(format_leaderboard_table(study, 10))
    text = console.export_text()
    assert "98.00-102.00" in text and text.count("tied with #1") == 2 and "imprecise" in text
    row_3 = next(line for line in text.splitlines() if line.startswith("│ 3 "))
    assert "?" in row_3  # the single measurement's CI is unknown

    best = build_best_record(study)
    assert (best["trial"], best["ci_low"], best["ci_high"], best["tied_with"]) == (0, 98.0, 102.0, [1, 4])
    assert best["validated"] is False
    shown = build_show_record(study)["best"][0]
    assert shown["tied_with"] == [1, 4] and shown["ci_source"] == "precision" and shown["tie_rule"] == "welch"

    export = build_export_frame(study)
    assert str(export["ci_low"].dtype) == "float64" and str(export["tied_with_best"].dtype) == "boolean"
    assert list(export.loc[export["rank"].notna(), "tied_with_best"].astype(object)) == [True, True, True, pd.NA, False]

    section = build_top_section(build_report_data(study))
    assert "The top is a tie: trials 1, 4" in section.paragraphs[0]
    rows = {row[1]: row for row in section.tables[0].rows}
    assert rows["0"][3] == "98.00-102.00 (precision)" and rows["1"][4] == "tied" and rows["3"][3] == "unknown"
    assert rows["4"][3].endswith("(precision, imprecise)")


def test_validated_finalists_rank_by_their_reruns_mean_with_its_t_interval(study):
    reruns = {"trial 2": [110.0, 111.0, 109.5], "trial 0": [100.0, 101.0, 99.0]}
    rows = summarize_finalists([Measured(label, v) for label, values in reruns.items() for v in values])
    study.set_user_attr("validation", {"study": "v", "rows": rows})
    frame = ranked_frame(study)
    assert list(frame["trial"][:2]) == [2, 0] and frame.loc[0, "ci_source"] == "validation"
    low, high = stats.t.interval(0.95, 2, loc=sum(reruns["trial 2"]) / 3, scale=stats.sem(reruns["trial 2"]))
    assert (frame.loc[0, "ci_low"], frame.loc[0, "ci_high"]) == (pytest.approx(low), pytest.approx(high))
    p = stats.ttest_ind(reruns["trial 2"], reruns["trial 0"], equal_var=False).pvalue
    assert frame.loc[1, "tied_with_best"] == bool(p >= 0.05)
    best = build_best_record(study)
    assert best["trial"] == 2 and best["validated"] is True and best["value"] == pytest.approx(sum(reruns["trial 2"]) / 3)
    # at another level the re-runs (of the objective's level) do not apply
    assert set(ranked_frame(study, level=1)["ci_source"]) <= {"none", ""}


def test_a_campaigns_declared_tie_is_the_tie_set_everywhere(study):
    """A finalist re-run once cannot be separated from the winner: the campaign's verdict says tie,
    and the leaderboard, best --json and show say the same (not 'unknown' on one, 'tied' on another)."""
    reruns = {"trial 2": [110.0, 111.0, 109.5], "trial 0": [100.0, 101.0, 99.0], "trial 3": [104.0]}
    rows = summarize_finalists([Measured(label, v) for label, values in reruns.items() for v in values])
    verdict = {"winner": "trial 2", "runner_up": "trial 3", "separated": False, "tie": True,
               "tied_with": ["trial 3"], "reason": "6 runs each (--max-repeats) did not separate them"}
    study.set_user_attr("validation", {"study": "v", "rows": rows})
    assert ranked_frame(study).set_index("trial").loc[3, "tied_with_best"] is None  # no interval, no verdict
    study.set_user_attr("validation", {"study": "v", "rows": rows, "verdict": verdict})
    frame = ranked_frame(study).set_index("trial")
    assert frame.loc[3, "tied_with_best"] is True and frame.loc[3, "tie_rule"] == "campaign"
    assert build_best_record(study)["tied_with"] == [3]
    assert frame.loc[0, "tied_with_best"] is False  # Welch separated it from the winner
