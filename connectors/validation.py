"""Parameter checks shared by the connectors: fail fast with the parameter's name."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, option: str) -> int:
    """``500ms`` / ``30s`` / ``5m`` / ``1h`` / ``1d`` in milliseconds; ValueError naming ``option``
    otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{option}: expected a duration like 500ms, 30s, 5m, 1h or 1d, got {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


#: What a value may contain to be written verbatim into a Flink SQL ``WITH ('key' = 'value')`` option.
_SQL_OPTION_VALUE = re.compile(r"^[A-Za-z0-9._:,-]+$")


def sql_option_value(value: str, name: str) -> str:
    """``value``, if it may be written verbatim (unescaped) into a Flink SQL ``WITH`` option: letters,
    digits and ``. _ - : ,`` only; ValueError naming ``name`` otherwise."""
    if not _SQL_OPTION_VALUE.match(value):
        raise ValueError(f"{name}: {value!r} may only contain letters, digits and . _ - : ,")
    return value
