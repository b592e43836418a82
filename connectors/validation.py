"""Parameter checks shared by the connectors: fail fast with the parameter's name."""

from __future__ import annotations

import re

from privstream.sketches.validation import check_int


def require_int(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``; ValueError naming ``name`` otherwise (bool is
    not an int): :func:`~privstream.sketches.validation.check_int`, its TypeError as ValueError."""
    try:
        return check_int(name, value, minimum=minimum, below=None if maximum is None else maximum + 1)
    except TypeError as exc:
        raise ValueError(str(exc)) from exc


_DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_duration_ms(text: str, option: str) -> int:
    """``500ms`` / ``30s`` / ``5m`` / ``1h`` in milliseconds; ValueError naming ``option`` otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{option}: expected a duration like 500ms, 30s, 5m or 1h, got {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]
