"""Fail-fast parameter checks whose messages name the offending parameter."""

from __future__ import annotations

import numpy as np


def check_int(name: str, value: object, *, minimum: int = 1, below: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer (not bool) with minimum <= value (< below)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if below is not None and value >= below:
        raise ValueError(f"{name} must be < {below}, got {value}")
    return value
