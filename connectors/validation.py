"""Parameter checks shared by the connectors: fail fast with the parameter's name."""

from __future__ import annotations

import re


def require_int(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``; ValueError naming ``name`` otherwise (bool is not an int)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: must be an int, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and <= {maximum}"
        raise ValueError(f"{name}: must be >= {minimum}{upper}, got {value!r}")
    return value


_DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_duration_ms(text: str, option: str) -> int:
    """``500ms`` / ``30s`` / ``5m`` / ``1h`` in milliseconds; ValueError naming ``option`` otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{option}: expected a duration like 500ms, 30s, 5m or 1h, got {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]
