"""Parameter checks shared by the connectors: fail fast with the parameter's name."""

from __future__ import annotations


def require_int(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``; ValueError naming ``name`` otherwise (bool is not an int)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: must be an int, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and <= {maximum}"
        raise ValueError(f"{name}: must be >= {minimum}{upper}, got {value!r}")
    return value
