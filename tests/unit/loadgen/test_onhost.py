import json
import math

import pytest

from sweeper.errors import InfraError, UserError
from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.onhost import SHIPPED, build_bundle, parse_host_run, resolve_load_from, run_timeout_s

SAMPLE = {"ok": True, "error": "", "start": 1.0, "ttft": 0.05, "chunk_times": [1.05, 1.06], "chunk_tokens": [1, 1],
          "end": 1.06, "prompt_tokens": 4, "output_tokens": 2, "streamed_tokens": 2, "usage_reported": True,
          "requested_output_tokens": 2, "reconnects": 0}
LAG = {"ticks": 3, "median_ms": 0.1, "p99_ms": 0.3, "max_ms": 0.3}


def never() -> bool:
    raise AssertionError("probed although the setting decides")


def test_where_load_runs():
    assert resolve_load_from("host", "local", never) == "controller"  # a local host is the controller
    assert resolve_load_from("auto", "local", never) == "controller"
    assert resolve_load_from("controller", "ssh", never) == "controller"
    assert resolve_load_from("host", "ssh", never) == "host"
    assert resolve_load_from("auto", "ssh", lambda: True) == "host"
    assert resolve_load_from("auto", "ssh", lambda: False) == "controller"


def test_the_hosts_answer_becomes_the_same_level_run():
    answer = {"samples": [SAMPLE], "start": 1.0, "end": 1.1, "lag": LAG, "ran": {"loop": "uvloop"}}
    run = parse_host_run("box", "python3", 0, json.dumps(answer), "")
    assert run.samples[0].chunk_times == [1.05, 1.06] and run.samples[0].ok
    assert math.isclose(run.duration_s, 0.1) and run.lag.ticks == 3 and run.ran == {"loop": "uvloop"}


def test_a_failed_request_with_nan_ttft_survives_the_trip():
    failed = SAMPLE | {"ok": False, "error": "ClientConnectorError: refused", "ttft": float("nan")}
    run = parse_host_run("box", "python3", 0, json.dumps({"samples": [failed], "start": 0, "end": 1, "lag": LAG}), "")
    assert math.isnan(run.samples[0].ttft) and run.samples[0].error.startswith("ClientConnectorError")


def test_a_missing_or_too_old_python_on_the_host_is_the_users_to_fix():
    with pytest.raises(UserError, match=r"host 'box': load_from: host needs python >= 3.9 on the host "
                                        r"\(/opt/py\): bash: /opt/py: No such file.*set hosts.box.python, "
                                        r"or load_from: controller"):
        parse_host_run("box", "/opt/py", 127, "", "bash: /opt/py: No such file or directory\n")
    with pytest.raises(UserError, match=r"needs python >= 3.9 .*SyntaxError: invalid syntax"):
        parse_host_run("box", "/opt/py", 1, "", "  File ...\nSyntaxError: invalid syntax\n")


def test_other_failures_are_infrastructure_faults_with_the_last_stderr_line():
    with pytest.raises(InfraError, match=r"failed \(exit 1\): MemoryError"):
        parse_host_run("box", "python3", 1, "", "Traceback ...\nMemoryError\n")
    with pytest.raises(InfraError, match="unreadable answer"):
        parse_host_run("box", "python3", 0, "{not json", "")
    with pytest.raises(InfraError, match="unreadable answer"):
        parse_host_run("box", "python3", 0, json.dumps({"samples": [{"ok": True}]}), "")


def test_the_run_may_last_one_request_timeout_per_round_plus_slack():
    options = StreamOptions(timeout_s=100.0)
    assert run_timeout_s(8, 4, options) == 2 * 100 + 60
    assert run_timeout_s(9, 4, options) == 3 * 100 + 60


def test_the_bundle_is_the_clients_modules_and_needs_only_the_standard_library():
    bundle = build_bundle()
    assert set(bundle) == set(SHIPPED)
    for text in bundle.values():
        for line in text.splitlines():
            if line.startswith(("import ", "from ")) and "sweeper" not in line:
                module = line.split()[1].split(".")[0]
                assert module in {"__future__", "asyncio", "json", "math", "platform", "sys", "time", "dataclasses",
                                  "types", "typing", "urllib", "ipaddress", "socket", "struct"}, line
            if line.startswith("from sweeper"):
                assert line.split()[1].replace(".", "/") + ".py" in SHIPPED or line.split()[1] == "sweeper.loadgen", line


def test_load_from_in_hosts_yaml_defaults_to_auto_and_names_a_bad_value(tmp_path):
    from sweeper.errors import ConfigError
    from sweeper.spec.hosts import load_hosts

    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  box:\n    transport: ssh\n    address: h\n")
    assert load_hosts(path).hosts["box"].load_from == "auto"
    path.write_text("hosts:\n  box:\n    transport: ssh\n    address: h\n    load_from: remote\n")
    with pytest.raises(ConfigError, match=r"hosts.yaml:5: hosts.box.load_from: expected one of 'auto', "
                                          r"'controller' or 'host' \(got 'remote'\)"):
        load_hosts(path)
