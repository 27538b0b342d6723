"""The remote launch script and folder layout of an SSH trial."""

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
