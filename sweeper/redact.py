"""Secrets never reach results or logs: values of secret-looking variables are masked."""

from __future__ import annotations

import re
from typing import Mapping

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@/\s]+(@)")
MASK = "***"


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if _SECRET_NAME.search(k) else v) for k, v in env.items()}


def redact_url(url: str) -> str:
    """postgresql://user:pw@host/db -> postgresql://user:***@host/db"""
    return _URL_PASSWORD.sub(rf"\1{MASK}\2", url)
