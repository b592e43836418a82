"""The one integer check, and the upper bounds on privacy parameters: fail fast with an error naming
the offending parameter.

The core, the operators and the connectors check integer parameters with :func:`check_int`, so
"an int" means the same thing everywhere: never a bool (``True`` is an ``int`` subclass, but is
never a count), a numpy integer only where the call site opts in. It imports nothing from
privstream, so any module may use it. :func:`check_privacy_bound` is the one rule every job and
command applies to the ε, δ and ρ it is given (ε <= 100, δ <= 0.1, ρ <= 50).
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


#: The largest privacy parameters a job or command accepts (docs/privacy.md, "Parameter bounds"):
#: beyond them a guarantee promises nothing anyone would mean, so the value is a typo or a unit error.
MAX_EPSILON = 100.0
MAX_DELTA = 0.1
MAX_RHO = 50.0

_BOUNDS = {
    "epsilon": ("ε", MAX_EPSILON, "e^ε bounds how much more likely any output becomes"),
    "delta": ("δ", MAX_DELTA, "δ is the probability the guarantee may fail outright"),
    "rho": ("ρ", MAX_RHO, "ρ-zCDP above that is ε > 100 at δ = 1e-6"),
}


def check_privacy_bound(option: str, value: float | None, parameter: str) -> None:
    """Refuse a privacy parameter no one would mean: ε > :data:`MAX_EPSILON`, δ > :data:`MAX_DELTA`,
    ρ > :data:`MAX_RHO` (``parameter``: "epsilon", "delta" or "rho"; None passes). The message
    starts with ``option`` (e.g. ``--total-epsilon``). Type and range checks (a finite number >= 0)
    stay with the caller; a value that is not a number passes here, for them to refuse."""
    symbol, bound, why = _BOUNDS[parameter]
    if isinstance(value, int | float) and not isinstance(value, bool) and value > bound:
        raise ValueError(
            f"{option}: {symbol} = {value:g} is above {bound:g}, where the guarantee means nothing ({why}); "
            f"privstream refuses {symbol} > {bound:g} (a typo or a unit error?)"
        )
