"""The study's answer (results/answer.py) read by every surface: validated configs rank above the
sweep's single runs, `tied_with` says null where no statement is possible and [] where nothing is
tied, the campaign's verdict is the tie set, the noise floor is shown where recorded, and a
validation run's progress lines name the sweep trial it re-measures. Studies built in-process."""

from types import SimpleNamespace

import pytest
from rich.console import Console

from sweeper.results.answer import build_answer, format_answer_lines, format_noise_floor
from sweeper.results.campaign_summary import format_summary_lines
from sweeper.results.ranking import ranked_frame
from sweeper.results.report_data import build_report_data
from sweeper.results.report_sections import build_top_section
from sweeper.results.script import best_launch_script
from sweeper.results.show import build_best_record, build_show_record
from sweeper.results.table import format_leaderboard_table
from sweeper.workflows.ablation import Measured, summarize_finalists
from sweeper.study.store import trial_title
from sweeper.spec.hosts import HostSpec
from sweeper.trial.context import TrialOutcome
from tests.support.studies import TP_SPACE, level, make_study, record

NOISE = {"between_cv": 0.018, "within_cv": 0.009, "launches": 5, "repeats": 3, "level": "c16"}


def sweep(values):
    """A study whose trials measured these single values at C=16 (no interval)."""
    study = make_study()
    study.set_user_attr("reference_text", "Paris")
    for value in values:
        record(study, {}, TrialOutcome({}, levels={1: level(10.0), 16: level(value)}, output_text="Paris", launched=True))
    return study


def validate(study, reruns, verdict=None):
    rows = summarize_finalists([Measured(label, v) for label, values in reruns.items() for v in values])
    study.set_user_attr("validation", {"study": "v", "rows": rows, **({"verdict": verdict} if verdict else {})})


def table_text(study):
    console = Console(width=250, record=True)
    console.print(format_leaderboard_table(study, 10))
    return console.export_text()


def test_an_unvalidated_best_says_no_tie_statement_and_a_validated_clear_winner_says_none():
    study = sweep([100.0, 90.0])
    best = build_best_record(study)
    assert (best["trial"], best["validated"], best["tied_with"], best["launches"]) == (0, False, None, 1)
    assert build_show_record(study)["best"][0]["tied_with"] is None
    validate(study, {"trial 0": [100.0, 101.0, 99.0], "trial 1": [90.0, 91.0, 89.0]})
    best = build_best_record(study)
    assert (best["trial"], best["validated"], best["tied_with"], best["launches"]) == (0, True, [], 3)
    assert format_answer_lines(build_answer(study))[1] == "no tie: no other validated config is tied with it"


def test_a_single_sweep_run_never_ranks_above_validated_means():
    # trial 1's one sweep value (120) beats both validated means; trial 3 joined the validation with one run
    study = sweep([100.0, 120.0, 104.0, 130.0])
    validate(study, {"trial 0": [100.0, 101.0, 99.0], "trial 2": [105.0, 106.0, 104.0], "trial 3": [103.0]})
    frame = ranked_frame(study, feasible_only=True)
    assert list(frame["trial"]) == [2, 3, 0, 1]  # validated by their re-runs' means, then the single run
    assert list(frame["validated"]) == [True, True, True, False]
    assert frame.loc[1, "rank_value"] == 103.0  # its fresh launch, not its sweep value (130)
    assert frame.loc[3, "tied_with_best"] is None  # a sweep value against launch-to-launch means: unknown
    assert build_best_record(study)["trial"] == 2
    row_1 = next(line for line in table_text(study).splitlines() if line.startswith("│ 1 "))
    assert "unvalidated" in row_1


def test_the_campaigns_verdict_is_the_winner_and_tie_of_best_show_leaderboard_report_and_script():
    """The case of issue 29: trial 7 re-run once (its sweep value the highest), trial 5 the declared
    winner, tied with 6 and 7."""
    study = sweep([90.0, 91.0, 92.0, 93.0, 94.0, 100.0, 101.0, 130.0])
    verdict = {"winner": "trial 5", "runner_up": "trial 6", "separated": False, "tie": True,
               "tied_with": ["trial 6", "trial 7"], "p": 0.4, "reason": "3 runs each (--max-repeats) did not separate them"}
    # trial 6's mean is a hair higher (re-runs recorded after the verdict, or equal means in another
    # order): the verdict's winner stays #1, with the verdict's tie set
    validate(study, {"trial 5": [100.0, 104.0, 96.0], "trial 6": [102.0, 98.0, 101.0], "trial 7": [99.0]}, verdict)
    best = build_best_record(study)
    assert (best["trial"], best["validated"], best["tied_with"], best["tie_rule"]) == (5, True, [6, 7], "campaign")
    assert best["why"] == verdict["reason"] and best["launches"] == 3
    frame = ranked_frame(study, feasible_only=True)
    assert list(frame["trial"][:3]) == [5, 6, 7] and frame.loc[0, "ci_low"] == best["ci_low"]
    assert list(frame["tied_with_best"][1:3]) == [True, True]
    assert build_show_record(study)["best"][0]["tied_with"] == [6, 7]
    data = build_report_data(study)
    assert (data.answer.trial, data.answer.tied_with) == (5, [6, 7])
    assert build_top_section(data).paragraphs[0] == (
        "The top is a tie: trials 6, 7 cannot be told apart from #1 (trial 5): the campaign could not separate "
        "them (3 runs each (--max-repeats) did not separate them).")
    study.set_user_attr("host_name", "local")
    script = best_launch_script(study, TP_SPACE, HostSpec(transport="local"))
    header = [line for line in script.splitlines() if line.startswith("# ")]
    assert header[0].startswith("# best of study") and ", trial 5: output_throughput@c16 = 100.00 (validated mean of " \
        "3 fresh launches, 95% CI " in header[0]
    assert header[1] == "# tied with trials 6, 7: the campaign could not separate them (3 runs each (--max-repeats) " \
                        "did not separate them)"


def test_the_noise_floor_is_shown_where_recorded_and_absent_where_not():
    assert format_noise_floor(NOISE) == ("noise floor: between-launch CV 1.8%, within-launch CV 0.9% "
                                         "(5 launches x 3 repeats, c16)")
    assert format_noise_floor({**NOISE, "within_cv": None}).startswith(
        "noise floor: between-launch CV 1.8%, within-launch CV unknown")
    study = sweep([100.0, 90.0])
    validate(study, {"trial 0": [100.0, 101.0, 99.0], "trial 1": [90.0, 91.0, 89.0]})
    study.set_user_attr("host_name", "local")
    summary = {"winner": {"trial": 0, "params": {}, "mean": 100.0, "ci95": 2.5, "runs": 3, "failed": 0},
               "runner_up": None, "separated": True, "tie": False, "tied_with": [], "p": 0.01, "why": "Welch",
               "launches": {"total": 8, "sweep": 2, "validation": 6, "profile": 0}, "failures": {},
               "server_hours": 0.1, "gpus_per_launch": 8, "gpu_hours": 0.8, "gap": None, "phases": {},
               "metric": "output_throughput"}
    surfaces = lambda: [format_answer_lines(build_answer(study)), format_summary_lines(summary),  # noqa: E731
                        build_top_section(build_report_data(study)).paragraphs,
                        best_launch_script(study, TP_SPACE, HostSpec(transport="local")).splitlines()]
    assert not any("noise floor" in line for lines in surfaces() for line in lines)
    study.set_user_attr("noise_floor", NOISE)
    summary["noise_floor"] = NOISE
    for lines in surfaces():
        assert sum("noise floor: between-launch CV 1.8%, within-launch CV 0.9% (5 launches x 3 repeats" in line
                   or "Noise floor: between-launch CV 1.8%" in line for line in lines) == 1, lines
    assert build_best_record(study)["noise_floor"] == NOISE


@pytest.mark.parametrize("attrs, name", [({}, "trial 4"), ({"label": "trial 5", "measure_again": True}, "sweep trial 5"),
                                         ({"label": "baseline", "measure_again": True}, "trial 4")])
def test_progress_lines_name_a_validation_run_by_the_sweep_trial_it_re_measures(attrs, name, capsys):
    from sweeper.cli.progress import LineEvents

    assert trial_title(SimpleNamespace(number=4, user_attrs=attrs)) == name
    events = LineEvents()
    events.trial_started(name, 1, 4, {"tp": 8})
    events.stage(name, "launch")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f" {name} (evaluation 1 of 4): tp=8") and lines[1].endswith(f" {name}: launch")
