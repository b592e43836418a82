"""The one integer check: fail fast with an error naming the offending parameter.

The core, the operators and the connectors check integer parameters with :func:`check_int`, so
"an int" means the same thing everywhere: never a bool (``True`` is an ``int`` subclass, but is
never a count), a numpy integer only where the call site opts in. It imports nothing from
privstream, so any module may use it.
"""

from __future__ import annotations

import numpy as np


def _bounds(minimum: int | None, below: int | None) -> str:
    """The allowed range as the error messages state it: ``>= 1``, ``in 1..255``, ``< 8`` or ``""``."""
    if minimum is not None and below is not None:
        return f" in {minimum}..{below - 1}"
    if minimum is not None:
        return f" >= {minimum}"
    if below is not None:
        return f" < {below}"
    return ""


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = 1,
    below: int | None = None,
    allow_numpy: bool = False,
    type_error: type[Exception] = TypeError,
) -> int:
    """``value`` as an ``int`` if it is an integer with ``minimum <= value < below``.

    A bool is never an integer here; a numpy integer is one only with ``allow_numpy``. A value of
    another type raises ``type_error`` (TypeError, or ValueError where a call site's contract is a
    ValueError for every bad value), one out of range raises ValueError. ``minimum`` or ``below``
    None leaves that side open. The message starts with ``"{name}: "`` and states the range;
    a wrong-typed value is named by its type only, never echoed.
    """
    if (
        isinstance(value, bool | np.bool_)
        or not isinstance(value, int | np.integer)
        or (isinstance(value, np.integer) and not allow_numpy)
    ):
        raise type_error(f"{name}: must be an int{_bounds(minimum, below)}, got {type(value).__name__}")
    number = int(value)
    if (minimum is not None and number < minimum) or (below is not None and number >= below):
        raise ValueError(f"{name}: must be an int{_bounds(minimum, below)}, got {number}")
    return number
