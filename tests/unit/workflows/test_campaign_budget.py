"""The campaign's sweep budget (workflows/campaign_phases.py sweep_budget): --trials or the space's, within
--max-launches less the finalists' first rounds and the profile's launch."""

import pytest

from sweeper.errors import UserError
from sweeper.spaces import packaged_spaces
from sweeper.spec.space_file import load_space
from sweeper.workflows.campaign_phases import sweep_budget

DEMO = load_space(packaged_spaces()["demo"])  # the simulator (it has a profiler), budget 36


def test_the_space_budget_unless_trials_says():
    assert sweep_budget(DEMO, None, None, 3) == DEMO.budget.trials == 36
    assert sweep_budget(DEMO, 10, None, 3) == 10


def test_max_launches_leaves_room_for_two_runs_of_each_finalist_and_the_profile():
    assert sweep_budget(DEMO, None, 20, 3) == 20 - 2 * 3 - 1
    assert sweep_budget(DEMO, 5, 20, 3) == 5


def test_no_room_is_refused_naming_the_flag():
    with pytest.raises(UserError, match="leaves no launch for validation after --trials 12"):
        sweep_budget(DEMO, 12, 12, 3)
    with pytest.raises(UserError, match="no room for a sweep and 3 finalists x 2 runs"):
        sweep_budget(DEMO, None, 7, 3)
