"""hosts/ssh_config.py: a hosts.yaml entry over an OpenSSH config (connections: tests/integration/test_ssh_host.py)."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from sweeper.errors import UserError
from sweeper.hosts.ssh_config import GLOBAL_KNOWN_HOSTS, read_ssh_config, resolve_target

CONFIG = """\
Host gpu-box
  HostName 10.0.0.7
  Port 2222
  User alice
  IdentityFile ~/.ssh/gpu_key
  IdentityFile ~/.ssh/second_key

Host *
  User fallback
  IdentitiesOnly no
"""


def test_the_config_fills_what_hosts_yaml_leaves_unset(isolated_home):
    target = resolve_target("gpu-box", CONFIG)
    assert (target.hostname, target.port, target.user) == ("10.0.0.7", 2222, "alice")
    assert target.key_files == (f"{isolated_home}/.ssh/gpu_key", f"{isolated_home}/.ssh/second_key")
    assert not target.identities_only and not target.proxied
    assert target.known_hosts == (f"{isolated_home}/.ssh/known_hosts", f"{isolated_home}/.ssh/known_hosts2")
    assert target.global_known_hosts == GLOBAL_KNOWN_HOSTS
    other = resolve_target("elsewhere", CONFIG)
    assert (other.hostname, other.port, other.user, other.key_files) == ("elsewhere", 22, "fallback", ())


def test_explicit_hosts_yaml_keys_win_even_port_22(isolated_home):
    target = resolve_target("gpu-box", CONFIG, port=22, user="root", identity_file="~/k")
    assert (target.hostname, target.port, target.user) == ("10.0.0.7", 22, "root")
    assert target.key_files == (f"{isolated_home}/k",)  # replaces the config's list


def test_proxy_command_tokens_see_the_explicit_port_and_user():
    text = "Host gpu-box\n  HostName 10.0.0.7\n  Port 2222\n  ProxyCommand ssh -W %h:%p -l %r bastion\n"
    assert resolve_target("gpu-box", text).proxy_command == f"ssh -W 10.0.0.7:2222 -l {getpass.getuser()} bastion"
    target = resolve_target("gpu-box", text, port=22, user="root")
    assert target.proxy_command == "ssh -W 10.0.0.7:22 -l root bastion" and target.proxied
    assert resolve_target("gpu-box", "Host gpu-box\n  ProxyCommand none\nHost *\n  ProxyCommand x\n").proxy_command is None


def test_proxy_command_and_proxy_jump_together_are_refused():
    with pytest.raises(UserError, match="both ProxyCommand and ProxyJump"):
        resolve_target("gpu-box", "Host gpu-box\n  ProxyJump bastion\n  ProxyCommand nc %h %p\n")
    assert resolve_target("gpu-box", "Host gpu-box\n  ProxyJump bastion\n").proxy_jump == "bastion"


def test_identities_only_and_known_hosts_files_with_tokens(isolated_home):
    text = ("Host gpu-box\n  IdentitiesOnly yes\n  UserKnownHostsFile ~/.ssh/kh_%h_%p %d/other\n"
            "  GlobalKnownHostsFile /etc/site_hosts\n")
    target = resolve_target("gpu-box", text, port=2200)
    assert target.identities_only and target.key_files == ()
    assert target.known_hosts == (f"{isolated_home}/.ssh/kh_gpu-box_2200", f"{isolated_home}/other")
    assert target.global_known_hosts == ("/etc/site_hosts",)


def test_bad_config_is_one_line_naming_the_alias():
    with pytest.raises(UserError, match="ssh config for 'gpu-box'.*Port 'abc'"):
        resolve_target("gpu-box", "Host gpu-box\n  Port abc\n")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_include_resolves_relative_paths_under_dot_ssh_with_globs_in_order(isolated_home, tmp_path):
    _write(isolated_home / ".ssh" / "conf.d" / "20-b.conf", "Host gpu-box\n  User from-b\n  Port 2\n")
    _write(isolated_home / ".ssh" / "conf.d" / "10-a.conf", "Host gpu-box\n  User from-a\n")
    _write(isolated_home / ".ssh" / "abs.conf", "Host gpu-box\n  HostName 10.0.0.9\n")
    config = _write(tmp_path / "config", f"Include conf.d/*.conf {isolated_home}/.ssh/abs.conf missing-*.conf\n"
                                         "Port 3\n")
    target = resolve_target("gpu-box", read_ssh_config("gpu-box", str(config)))
    assert (target.user, target.port, target.hostname) == ("from-a", 2, "10.0.0.9")
    assert resolve_target("other", read_ssh_config("other", str(config))).port == 3  # global again after Include


def test_include_inside_a_host_block_applies_to_that_host_only(isolated_home, tmp_path):
    _write(isolated_home / ".ssh" / "corp.conf", "User corp\nHost *\n  IdentityFile ~/.ssh/corp_key\n")
    config = _write(tmp_path / "config", "Host *.corp\n  Include corp.conf\n  Port 2022\nHost *\n  User home\n")
    inside = resolve_target("gpu.corp", read_ssh_config("gpu.corp", str(config)))
    assert (inside.user, inside.port) == ("corp", 2022)  # the lines after the Include stay in the block
    assert inside.key_files == (f"{isolated_home}/.ssh/corp_key",)
    outside = resolve_target("gpu.home", read_ssh_config("gpu.home", str(config)))
    assert (outside.user, outside.port, outside.key_files) == ("home", 22, ())  # not even its Host * block


def test_the_default_config_and_its_errors(isolated_home, tmp_path):
    _write(isolated_home / ".ssh" / "config", "Host gpu-box\n  Port 2201\n")
    assert resolve_target("gpu-box", read_ssh_config("gpu-box")).port == 2201  # ~/.ssh/config, then /etc/ssh's
    assert read_ssh_config("gpu-box", "none") == ""
    with pytest.raises(UserError, match=f"ssh_config {tmp_path}/absent: no such file"):
        read_ssh_config("gpu-box", str(tmp_path / "absent"))
    loop = _write(tmp_path / "loop", f"Include {tmp_path}/loop\n")
    with pytest.raises(UserError, match="Include nested deeper than 16"):
        read_ssh_config("gpu-box", str(loop))
