"""Key expressions of a view's joins on a global table (`key: upper(payments.method)`): the
`alias.column` references they make, and the same text with each reference rewritten, for the
loader (which aliases and columns it reads), gold (internal column names) and the SQL oracle
(quoted names per dialect). Pure text: string literals are left untouched.

>>> column_references("upper(trim(p.method)) || '.x'")
[('p', 'method')]
>>> rewrite_references("coalesce(o.status, 'n.a')", lambda a, c: f"`{a}_{c}`")
"coalesce(`o_status`, 'n.a')"
"""

from __future__ import annotations

import re
from typing import Callable

# a single-quoted string (with '' or \' inside), or alias.column not followed by "(" (a function)
_TOKEN = re.compile(r"'(?:[^'\\]|\\.|'')*'|(?<![\w.`])([A-Za-z_]\w*)\.([A-Za-z_]\w*)\b(?!\s*\()")


def column_references(expression: str) -> list[tuple[str, str]]:
    """(alias, column) of each `alias.column` in `expression`, in order, each once."""
    found: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(expression):
        if m.group(1) and (m.group(1), m.group(2)) not in found:
            found.append((m.group(1), m.group(2)))
    return found


def rewrite_references(expression: str, name: Callable[[str, str], str]) -> str:
    """`expression` with every `alias.column` replaced by `name(alias, column)`."""
    return _TOKEN.sub(lambda m: name(m.group(1), m.group(2)) if m.group(1) else m.group(0), expression)
