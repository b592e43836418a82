"""Privacy budgets, conversions and composition.

* :class:`Budget` — (ε, δ)-DP (δ = 0: pure ε-DP).
* :class:`ZCDPBudget` — ρ-zCDP (Bun–Steinke 2016).

Conversions (the ones the papers use, DPSW = the sliding-window sketch paper, see
DPSW-Sketch Eq. (1)):

* :func:`zcdp_to_dp` — DPSW Thm 3.2 (Bun–Steinke Prop. 1.3): ρ-zCDP ⇒ (ρ + 2√(ρ·ln(1/δ)), δ)-DP.
* :func:`dp_to_zcdp` — DPSW Eq. (1): the ρ with ρ + 2√(ρ·ln(1/δ)) = ε, i.e.
  ρ = ε + 2L − 2√(εL + L²) = (√(L+ε) − √L)² with L = ln(1/δ) (the second form is used: it has no
  cancellation).
* :func:`pure_dp_to_zcdp` — ε-DP ⇒ (ε²/2)-zCDP (Bun–Steinke Prop. 1.4).

Composition: :func:`compose_sequential` adds ε, δ (basic composition) or ρ; :func:`compose_parallel`
takes the maximum (mechanisms on disjoint parts of the data, e.g. disjoint epochs at event level).
Budget values are stored as the floats given but composed exactly as the :class:`Fraction` of their
shortest decimal representation (:func:`exact_value`: 0.1 -> 1/10), so a ledger never drifts by
rounding; the mechanisms calibrate noise to the same exact values, so what is charged is exactly
what the noise provides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias


def exact_value(value: float | int | Fraction) -> Fraction:
    """The exact rational a budget parameter stands for: Fractions and ints as they are, floats via
    their shortest round-tripping decimal (``repr``), e.g. 0.1 -> 1/10."""
    if isinstance(value, Fraction | int):
        return Fraction(value)
    return Fraction(repr(float(value)))


def _check_real(value: object, name: str, *, upper: float | None = None, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")
    if upper is not None and v >= upper:
        raise ValueError(f"{name} must be < {upper}, got {value}")
    return v


@dataclass(frozen=True)
class Budget:
    """An (ε, δ)-DP guarantee or budget; δ = 0 means pure ε-DP."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_real(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", _check_real(self.delta, "delta", upper=1.0))

    @property
    def exact(self) -> tuple[Fraction, Fraction]:
        return exact_value(self.epsilon), exact_value(self.delta)

    def to_dict(self) -> dict[str, float | str]:
        return {"kind": "dp", "epsilon": self.epsilon, "delta": self.delta}

    def __str__(self) -> str:
        """``(ε=1, δ=1e-06)``: how logs and messages show a budget."""
        return f"(ε={self.epsilon:g}, δ={self.delta:g})"


@dataclass(frozen=True)
class ZCDPBudget:
    """A ρ-zCDP guarantee or budget."""

    rho: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", _check_real(self.rho, "rho"))

    @property
    def exact(self) -> tuple[Fraction]:
        return (exact_value(self.rho),)

    def to_dict(self) -> dict[str, float | str]:
        return {"kind": "zcdp", "rho": self.rho}


AnyBudget: TypeAlias = Budget | ZCDPBudget


def budget_from_dict(data: dict) -> AnyBudget:
    """Inverse of ``to_dict``."""
    kind = data.get("kind")
    if kind == "dp":
        return Budget(float(data["epsilon"]), float(data["delta"]))
    if kind == "zcdp":
        return ZCDPBudget(float(data["rho"]))
    raise ValueError(f"unknown budget kind {kind!r}")


def _log_inv_delta(delta: float) -> float:
    d = _check_real(delta, "delta", upper=1.0, allow_zero=False)
    return math.log(1.0 / d)


def zcdp_to_dp(rho: float | ZCDPBudget, delta: float) -> Budget:
    """DPSW Thm 3.2: ρ-zCDP implies (ρ + 2√(ρ·ln(1/δ)), δ)-DP for every δ ∈ (0, 1)."""
    r = rho.rho if isinstance(rho, ZCDPBudget) else _check_real(rho, "rho")
    big_l = _log_inv_delta(delta)
    return Budget(r + 2.0 * math.sqrt(r * big_l), delta)


def dp_to_zcdp(epsilon: float | Budget, delta: float | None = None) -> ZCDPBudget:
    """DPSW Eq. (1): the largest ρ whose Thm 3.2 conversion gives (ε, δ):
    ρ = ε + 2L − 2√(εL + L²) = (√(L+ε) − √L)², L = ln(1/δ)."""
    dlt: float | None
    if isinstance(epsilon, Budget):
        eps, dlt = epsilon.epsilon, epsilon.delta if delta is None else delta
    else:
        eps, dlt = _check_real(epsilon, "epsilon"), delta
    if dlt is None:
        raise ValueError("delta is required")
    big_l = _log_inv_delta(dlt)
    return ZCDPBudget((math.sqrt(big_l + eps) - math.sqrt(big_l)) ** 2)


def pure_dp_to_zcdp(epsilon: float) -> ZCDPBudget:
    """ε-DP implies (ε²/2)-zCDP (Bun–Steinke 2016, Prop. 1.4)."""
    eps = _check_real(epsilon, "epsilon")
    return ZCDPBudget(eps * eps / 2.0)


def _same_kind(budgets: list[AnyBudget]) -> type:
    if not budgets:
        raise ValueError("budgets must not be empty")
    kind = type(budgets[0])
    if kind not in (Budget, ZCDPBudget) or any(type(b) is not kind for b in budgets):
        raise TypeError("budgets must all be Budget or all be ZCDPBudget (convert first)")
    return kind


def _exact_sum(budgets: list[AnyBudget]) -> tuple[Fraction, ...]:
    parts = [b.exact for b in budgets]
    return tuple(sum(col, Fraction(0)) for col in zip(*parts, strict=True))


def compose_sequential(budgets: Iterable[AnyBudget]) -> AnyBudget:
    """Basic sequential composition: (Σε, Σδ) for DP, Σρ for zCDP."""
    items = list(budgets)
    kind = _same_kind(items)
    total = _exact_sum(items)
    return kind(*(float(v) for v in total))


def compose_parallel(budgets: Iterable[AnyBudget]) -> AnyBudget:
    """Parallel composition over disjoint data: the componentwise maximum."""
    items = list(budgets)
    kind = _same_kind(items)
    return kind(*(float(max(col)) for col in zip(*(b.exact for b in items), strict=True)))
