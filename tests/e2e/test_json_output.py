"""`show --json` and `best --json`: one JSON object on stdout, for scripts."""

import json

import pytest

pytestmark = pytest.mark.slow


def test_show_and_best_print_json_before_and_after_validation(cli):
    assert cli.run("sweep", "tiny.yaml", "--study", "j", "--trials", "4").returncode == 0
    shown = json.loads(cli.run("show", "j", "--json").stdout)
    assert shown["study"] == "j" and shown["evaluations"] == 4 and shown["budget"] == 4
    assert sum(shown["by_state"].values()) == shown["trials"] and shown["running"] == []
    assert "check_output/bad_output" in shown["not_ranked"]  # the garbage seed never ranks
    best = json.loads(cli.run("best", "j", "--json").stdout)
    assert best["trial"] == shown["best"][0]["trial"] and best["params"] == shown["best"][0]["params"]
    # one measurement, not re-validated: no tie statement is possible (null, not "no tie")
    assert best["validated"] is False and best["ci_low"] is None and best["tied_with"] is None

    result = cli.run("validate", "j", "--top", "2", "--repeats", "2")
    assert result.returncode == 0, result.stderr
    best = json.loads(cli.run("best", "j", "--json").stdout)
    assert best["validated"] is True and best["ci_low"] <= best["value"] <= best["ci_high"]
    assert set(best) == {"trial", "params", "value", "ci_low", "ci_high", "ci_source", "validated", "launches",
                         "failed_launches", "tied_with", "tie_rule", "why", "noise_floor"}
    assert isinstance(best["tied_with"], list) and best["launches"] >= 2 and best["noise_floor"] is None
    assert f"winner: trial {best['trial']} " in result.stdout


def test_best_json_of_a_study_with_nothing_feasible_is_an_error(cli):
    # the tiny space without its feasible baseline seed: trial 0 is the garbage seed
    (cli.workdir / "garbage.yaml").write_text((cli.workdir / "tiny.yaml").read_text().replace(
        "reference: baseline\n", "").replace("  - name: baseline\n    params: {tp_size: 8, ep_size: 1, "
                                             "moe_runner_backend: marlin, moe_a2a_backend: none, nccl_proto: Simple}\n", ""))
    # every trial failed for one cause: the sweep says so and exits 1 (the study is kept)
    assert cli.run("sweep", "garbage.yaml", "--study", "none", "--trials", "1").returncode == 1
    result = cli.run("best", "none", "--json")
    assert result.returncode == 2 and "no feasible trial yet" in result.stderr and result.stdout == ""
