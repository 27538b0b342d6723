"""Where and how to connect to an SSH host: a hosts.yaml entry over ~/.ssh/config, as OpenSSH reads it.

- read_ssh_config (I/O): the config text for one alias, `Include`s inlined (relative paths under
  ~/.ssh, or /etc/ssh for the system file; globs, sorted; an Include in a Host block only when the
  alias matches it), then /etc/ssh/ssh_config when the default ~/.ssh/config is used (`-F` semantics
  for an explicit `ssh_config:` file: that file only).
- resolve_target (pure, given the text): the Target. Explicit hosts.yaml keys win: port and user are
  put in front of the config (the first value obtained wins in OpenSSH, as for `ssh -p -l`), so the
  %p/%r tokens of ProxyCommand see them too; `identity_file` replaces the config's IdentityFile list.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
from dataclasses import dataclass

import paramiko

from sweeper.errors import UserError

USER_SSH_CONFIG = "~/.ssh/config"
SYSTEM_SSH_CONFIG = "/etc/ssh/ssh_config"
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH
_KEYWORD = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # paramiko's SSHConfig.SETTINGS_REGEX


@dataclass(frozen=True)
class Target:
    alias: str
    hostname: str
    port: int
    user: str | None
    key_files: tuple[str, ...]
    identities_only: bool = False  # only key_files (or the default ~/.ssh/id_* when none): no agent
    proxy_command: str | None = None  # tokens expanded; run by the shell
    proxy_jump: str | None = None
    known_hosts: tuple[str, ...] = ()  # UserKnownHostsFile, expanded; the first is where to add a key
    global_known_hosts: tuple[str, ...] = GLOBAL_KNOWN_HOSTS

    @property
    def display(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"

    @property
    def proxied(self) -> bool:
        return bool(self.proxy_command or self.proxy_jump)


# ---------------------------------------------------------------- reading (I/O)

def read_ssh_config(alias: str, path: str | None = None) -> str:
    """The config text ssh reads for `alias`: `path` (default ~/.ssh/config, then the system file;
    "none": no config) with its Includes inlined. A missing default file is an empty config; a
    missing `path` an error."""
    if path == "none":
        return ""
    if path is not None:
        if not os.path.isfile(os.path.expanduser(path)):
            raise UserError(f"ssh_config {path}: no such file")
        return _inline(os.path.expanduser(path), alias, "~/.ssh", 0)
    parts = [_inline(p, alias, base, 0) for p, base in ((os.path.expanduser(USER_SSH_CONFIG), "~/.ssh"),
                                                       (SYSTEM_SSH_CONFIG, "/etc/ssh")) if os.path.isfile(p)]
    return "\nHost *\n".join(parts)  # the system file starts outside the user file's last Host block


def _inline(path: str, alias: str, base: str, depth: int) -> str:
    if depth > MAX_INCLUDE_DEPTH:
        raise UserError(f"ssh config {path}: Include nested deeper than {MAX_INCLUDE_DEPTH} (a loop?)")
    try:
        with open(path, encoding="utf-8", errors="replace") as config:
            lines = config.read().splitlines()
    except OSError as exc:
        raise UserError(f"ssh config {path}: cannot read ({exc.strerror})") from None
    out, header, active = [], None, True  # header: the enclosing Host/Match line
    for number, line in enumerate(lines, 1):
        match = _KEYWORD.match(line.strip())
        keyword = match.group(1).lower() if match else ""
        if keyword in ("host", "match"):
            header = line.strip()
            active = keyword == "match" or _host_line_matches(match.group(2), alias)
        if keyword != "include":
            out.append(line)
            continue
        if not active:  # OpenSSH reads nothing of an Include in a Host block the alias is not in
            continue
        try:
            patterns = shlex.split(match.group(2))
        except ValueError:
            raise UserError(f"ssh config {path}:{number}: unparsable Include {match.group(2)!r}") from None
        for pattern in patterns:
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.expanduser(base), pattern)
            for included in sorted(glob.glob(pattern)):  # no match: nothing, as in OpenSSH
                if os.path.isfile(included):
                    out.append(_inline(included, alias, base, depth + 1))
        out.append(header or "Host *")  # what follows belongs to the enclosing block again
    return "\n".join(out)


def _host_line_matches(value: str, alias: str) -> bool:
    """OpenSSH's Host rule: some pattern matches and no negated one does."""
    try:
        patterns = shlex.split(value)
    except ValueError:
        return True  # paramiko reports the bad line when it parses the text
    if any(p.startswith("!") and fnmatch.fnmatch(alias, p[1:]) for p in patterns):
        return False
    return any(fnmatch.fnmatch(alias, p) for p in patterns if not p.startswith("!"))


# ---------------------------------------------------------------- resolving (pure)

def resolve_target(alias: str, config_text: str, port: int | None = None, user: str | None = None,
                   identity_file: str | None = None) -> Target:
    """Where and how to connect to `alias`: the explicit values win, the config fills the rest."""
    overrides = "".join([f"Port {port}\n" if port is not None else "", f"User {user}\n" if user else ""])
    try:
        found = paramiko.SSHConfig.from_text(overrides + config_text).lookup(alias)
    except (paramiko.ssh_exception.ConfigParseError, ValueError) as exc:
        raise UserError(f"ssh config for {alias!r}: {exc}") from None
    hostname = found.get("hostname", alias)
    try:
        resolved_port = int(found.get("port", 22))
    except ValueError:
        raise UserError(f"ssh config for {alias!r}: Port {found['port']!r} is not a number") from None
    resolved_user = found.get("user")
    proxy_command = found.get("proxycommand")  # `ProxyCommand none` is None
    proxy_jump = found.get("proxyjump")
    proxy_jump = None if proxy_jump in (None, "none") else proxy_jump
    if proxy_command and proxy_jump:
        raise UserError(f"ssh config for {alias!r}: both ProxyCommand and ProxyJump apply; keep one")
    files = [identity_file] if identity_file else found.get("identityfile", [])
    tokens = {"%h": hostname, "%p": str(resolved_port), "%r": resolved_user or _local_user(), "%n": alias,
              "%d": os.path.expanduser("~"), "%u": _local_user()}
    known = [_expand(f, tokens) for f in _words(found.get("userknownhostsfile"))] or \
        [os.path.expanduser(f) for f in USER_KNOWN_HOSTS]
    global_known = [_expand(f, tokens) for f in _words(found.get("globalknownhostsfile"))] or list(GLOBAL_KNOWN_HOSTS)
    return Target(alias=alias, hostname=hostname, port=resolved_port, user=resolved_user,
                  key_files=tuple(os.path.expanduser(f) for f in files),
                  identities_only=found.get("identitiesonly", "no").lower() == "yes",
                  proxy_command=proxy_command or None, proxy_jump=proxy_jump,
                  known_hosts=tuple(known), global_known_hosts=tuple(global_known))


def _words(value: str | None) -> list[str]:
    return shlex.split(value) if value else []


def _expand(value: str, tokens: dict[str, str]) -> str:
    """~ and the %-tokens OpenSSH expands in known-hosts paths (%% is a literal %)."""
    expanded = re.sub(r"%.", lambda m: "%" if m.group() == "%%" else tokens.get(m.group(), m.group()), value)
    return os.path.expanduser(expanded)


def _local_user() -> str:
    import getpass

    return getpass.getuser()
