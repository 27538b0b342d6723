"""Secrets never reach results or logs: values of secret-looking variables are masked."""

from __future__ import annotations

import re
import shlex
from typing import Mapping, Sequence

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@/\s]+(@)")
MASK = "***"
# a flag whose last word names a secret (--api-key, --hf-token), not --max-total-tokens
_SECRET_FLAG = re.compile(r"(^-+|[-_])(key|token|secret|password|passwd|credentials?|auth)$", re.IGNORECASE)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if _SECRET_NAME.search(k) else v) for k, v in env.items()}


def redact_url(url: str) -> str:
    """postgresql://user:pw@host/db -> postgresql://user:***@host/db"""
    return _URL_PASSWORD.sub(rf"\1{MASK}\2", url)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """--api-key VALUE / --api-key=VALUE -> the value masked (any secret-looking flag name)."""
    shown: list[str] = []
    for item in argv:
        flag, eq, _ = item.partition("=")
        if shown and _SECRET_FLAG.search(shown[-1]) and not item.startswith("-"):
            shown.append(MASK)
        elif eq and flag.startswith("-") and _SECRET_FLAG.search(flag):
            shown.append(f"{flag}={MASK}")
        else:
            shown.append(item)
    return shown


def redacted_command_line(argv: Sequence[str]) -> str:
    """The argv as one shell-quoted line with secret flag values masked: what is shown or written,
    never what is run."""
    return shlex.join(redact_argv(argv))
