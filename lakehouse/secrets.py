"""Secret values resolved in this process (Kafka passwords, key store passwords), and `redact`,
which every error message and report passes through before anyone sees it."""

from __future__ import annotations

import threading

REDACTED = "***"
MIN_LENGTH = 4  # shorter strings would redact ordinary words; no real secret is that short

_SECRETS: set[str] = set()
_LOCK = threading.Lock()


def remember(secret: str) -> None:
    """Keep `secret` for `redact` (called where a reference is resolved)."""
    if len(secret) >= MIN_LENGTH:
        with _LOCK:
            _SECRETS.add(secret)


def redact(text: str) -> str:
    """`text` with every secret resolved in this process replaced by ***.

    >>> remember("s3cr3t-value"); redact("login with s3cr3t-value failed")
    'login with *** failed'
    """
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text
