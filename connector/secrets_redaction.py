"""Keeps passwords, keys and tokens out of logs, errors and reprs."""

from __future__ import annotations

import re
from typing import Mapping

REDACTED = "[redacted]"

# Option names (with or without the "kafka." prefix) whose values are secrets.
_SECRET_KEY = re.compile(
    r"(password|secret|token|sasl\.jaas\.config|ssl\.key\.pem|ssl\.keystore\.|"
    r"sasl\.oauthbearer\.config|credential|private)",
    re.IGNORECASE,
)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact_config(conf: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``conf`` with every secret value replaced."""
    return {k: (REDACTED if is_secret_key(str(k)) and v is not None else v) for k, v in conf.items()}


def redact_text(text: str, conf: Mapping[str, object]) -> str:
    """Remove any secret value of ``conf`` that appears verbatim in ``text`` (e.g. a library error)."""
    for k, v in conf.items():
        if v is not None and is_secret_key(str(k)):
            s = str(v)
            if len(s) >= 3 and s in text:
                text = text.replace(s, REDACTED)
    return text
