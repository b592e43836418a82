"""Checks on sets of sketches (integer parameters: :func:`privstream.validation.check_int`)."""

from __future__ import annotations

from collections.abc import Sequence


def common_param(sketches: Sequence[object], name: str) -> int:
    """The value of parameter ``name`` shared by all ``sketches`` (ValueError if empty or unequal)."""
    values = {getattr(s, name) for s in sketches}
    if not values:
        raise ValueError("sketches must not be empty")
    if len(values) != 1:
        raise ValueError(f"sketches have different {name}: {sorted(values)}; pass {name} explicitly")
    return values.pop()
