"""The remote launch script and folder layout of an SSH trial."""

import json
import subprocess

from sweeper.hosts.launch_script import build_env_json, build_launch_script, build_remote_run_dir


def test_run_dir_from_the_local_trial_folder():
    assert build_remote_run_dir("~/.sweeper", "results/s1/trials/7") == "~/.sweeper/s1/7"
    assert build_remote_run_dir("/w", "/tmp/x/t") == "/w/x/t"


def test_script_quotes_every_value_and_leaves_secrets_out(tmp_path):
    argv = ["printf", "%s|", "a b", "$(touch pwned)", "`id`", "x;y", "it's", "line\nbreak"]
    env = {"PLAIN": "$HOME;`id`", "HF_TOKEN": "s3cret"}
    script = build_launch_script(argv, env)
    assert "s3cret" not in script and "HF_TOKEN" not in script
    assert "s3cret" not in build_env_json(env)
    (tmp_path / "launch.sh").write_text(script.replace("exec printf", 'printf "$PLAIN|"; exec printf'))
    out = subprocess.run(["/bin/sh", "launch.sh"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert out == "$HOME;`id`|" + "".join(f"{a}|" for a in argv[2:])
    assert not (tmp_path / "pwned").exists()


SECRET_FLAG_SPACE = """\
name: t
engine: sglang
model: /m
fixed_flags: {--api-key: sk-fl4g-s3cret, --max-total-tokens: 4096}
fixed_env: {HF_TOKEN: hf-env-s3cret}
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
"""


def test_command_sh_and_argv_json_mask_secret_flag_values_and_the_launch_keeps_them(tmp_path):
    from sweeper.engines import get_engine
    from sweeper.spec.hosts import HostSpec
    from sweeper.spec.space_file import parse_space
    from sweeper.trial.launch import write_launch_files

    space = parse_space(SECRET_FLAG_SPACE, "inline")
    spec = get_engine("sglang").build_launch_spec(space, {"tp_size": 8}, HostSpec(transport="local"), 30000, "py")
    write_launch_files(tmp_path, spec)
    for name in ("command.sh", "argv.json", "env.json"):
        text = (tmp_path / name).read_text()
        assert "s3cret" not in text, name
    assert "--api-key '***'" in (tmp_path / "command.sh").read_text()
    assert "--max-total-tokens 4096" in (tmp_path / "command.sh").read_text()
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--api-key") + 1] == "***" and argv[argv.index("--tp-size") + 1] == "8"
    assert "sk-fl4g-s3cret" in spec.argv  # what is launched is not redacted


def test_best_script_masks_secret_flag_values():
    from sweeper.results.script import format_launch_script
    from sweeper.spec.hosts import HostSpec
    from sweeper.spec.space_file import parse_space

    script = format_launch_script(parse_space(SECRET_FLAG_SPACE, "inline"), "box", HostSpec(transport="local"),
                                  {"tp_size": 4}, "py", 30000, "best")
    assert "s3cret" not in script
    assert "--api-key '***'" in script and "--tp-size 4" in script
