"""`sweeper campaign`: sweep, re-validate the finalists, profile the winner, report and launch
script, unattended (sweeper/workflows/campaign_phases.py); `sweeper resume` continues one (continue_campaign)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import List, Optional

import typer

from sweeper.cli.common import SPACE_ARG, RESULTS_OPT, STORAGE_OPT, WARM_START_OPT, console, parse_duration, user_errors
from sweeper.cli.progress import LineEvents, open_new_study, warm_start_study, with_progress
from sweeper.errors import UserError
from sweeper.study.store import StudyHandle, load_study
from sweeper.spec.space_file import load_space


class CliIO:
    """The campaign's trials with the sweep's progress view (an interrupt names the campaign to
    resume, whichever study ran); its news as timestamped lines."""

    def __init__(self, campaign: str):
        self.campaign = campaign

    def run_trials(self, handle, host, run) -> None:
        with_progress(handle, host, run, resume=self.campaign)

    def say(self, line: str) -> None:
        LineEvents().say(line)


def campaign(
    space_file: Path = SPACE_ARG,
    study: Optional[str] = typer.Option(None, "--study", help="Study name (default: space name + time)."),
    time_budget: Optional[str] = typer.Option(None, "--time-budget", help="The whole campaign, e.g. 8h: the sweep "
                                              "stops starting trials at 60% of it, validation at 100%."),
    finalists: int = typer.Option(3, "--finalists", min=1, help="K: the sweep's best configs re-measured first "
                                  "(more join while they could still be the winner)."),
    repeats: int = typer.Option(2, "--repeats", min=2, help="R: fresh servers per finalist in the first rounds; "
                                "rounds are added until the winner separates (Welch p < 0.05)."),
    max_repeats: int = typer.Option(6, "--max-repeats", min=2, help="Runs of one finalist before an unresolved "
                                    "top is declared a tie."),
    max_in_launch: int = typer.Option(5, "--max-in-launch-repeats", min=1, help="The most repeats of a level "
                                      "one validation launch measures (chosen from the measured noise floor)."),
    max_launches: Optional[int] = typer.Option(None, "--max-launches", min=1, help="Sweep evaluations, "
                                               "validation launches and the profile's launch, in all."),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="The sweep's budget of evaluations "
                                         "(default: the space's)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampler seed, for a reproducible search."),
    host: Optional[List[str]] = typer.Option(None, "--host", help="Host name in the hosts file (default local)."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file."),
    profile_seconds: float = typer.Option(5.0, "--profile-seconds", min=0.1, help="Seconds of load under the profiler."),
    warm_start: Optional[List[str]] = WARM_START_OPT,
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The case study unattended: sweep, re-validate the top K on fresh servers (interleaved, until
    the winner separates from the runner-up or the budget ends: a tie is declared), profile the
    winner, write the report and the winner's launch script. `sweeper resume STUDY` continues it."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.workflows.campaign_phases import CampaignSettings, start_campaign, sweep_budget

    with user_errors():
        space = load_space(space_file)
        if len(host or []) > 1:
            raise UserError("campaign: one --host (a host's gpu_sets are its parallelism); for several hosts run "
                            "`sweeper sweep --host A --host B`, then `sweeper validate`")
        if space.is_pareto:
            raise UserError(f"{space_file}: campaign needs one objective (the Pareto mode has no single winner)")
        seconds = parse_duration(time_budget) if time_budget else None
        budget = sweep_budget(space, trials, max_launches, finalists)
        name = study or f"{space.name}-{datetime.now():%Y%m%d-%H%M%S}"
        handle, connected = open_new_study(space_file, space, hosts, (host or ["local"])[0], name, results, storage,
                                           budget, None, enqueue_seeds=False)
        connected.close()  # each phase connects for itself
        warm_start_study(handle, warm_start or [])
        start_campaign(handle.study, CampaignSettings(seconds, finalists, repeats, max_repeats, max_launches, seed,
                                                      profile_seconds, max_in_launch))
        continue_campaign(handle, hosts, storage)


def continue_campaign(handle: StudyHandle, hosts: Path, storage: str | None) -> None:
    """Run the campaign from its stored phase to the end; print the morning summary."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.results.campaign_summary import build_campaign_summary, format_summary_lines
    from sweeper.workflows.campaign_phases import Campaign, campaign_record

    Campaign(handle, CliIO(handle.name), hosts, storage).run()
    validation = load_study(campaign_record(handle.study)["phases"]["validate"]["study"], handle.results_dir, storage)
    summary = build_campaign_summary(handle.study, validation)
    handle.study.set_user_attr("campaign_summary", summary)
    console.print(f"[bold]campaign {handle.name}: done[/]")
    for line in format_summary_lines(summary):
        console.print(line, highlight=False, markup=False)
    phases = campaign_record(handle.study)["phases"]
    console.print(f"report: {phases['report']['files'][0]}; launch script: {phases['script']['file']}",
                  highlight=False, markup=False)
