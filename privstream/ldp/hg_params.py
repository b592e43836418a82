"""HG-LDP parameters and the exact probabilities of its randomisers (Li et al., arXiv 2311.16062).

:class:`HgLdpParams` is shared by the client randomiser and the server, and is what a report's
public parameters identify. All probabilities are exact :class:`~fractions.Fraction` values built
from the rationalised ratios of :func:`privstream.ldp.grr.rational_exp_lower` (as for GRR): the
realised mechanism is ε'-LDP with ``ε' = effective_epsilon ≤ ε``.

* BGR and DSR spend the whole ε on one GRR (§4.1 Algorithm 1, §4.2 Algorithms 2–4):
  ``p = e^ε/(e^ε+d−1)``, ``q = 1/(e^ε+d−1)`` on D and ``p_s = e^ε/(e^ε+λ_h)``,
  ``q_s = 1/(e^ε+λ_h)`` on the shrunk domain H ∪ {⊥}.
* BDR and CNR split ``ε = ε₁ + ε₂`` with ``ε₁ = α·ε`` (default α = 1/3, §4.3): M1 is binary RR
  with ``p1 = e^ε₁/(e^ε₁+1)``; M2 is GRR on H with ``p2 = e^ε₂/(e^ε₂+λ_h−1)``; M3 is GRR on D∖H with
  ``p3 = e^ε₂/(e^ε₂+d−λ_h−1)``. Eq. (2) debiases with the per-report offset
  ``γ_h·p1·q2 + (1−γ_h)·q1/λ_h`` and the denominator ``p1·(p2 − q2)``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from privstream.ldp.grr import RATIO_DENOMINATOR_BITS, rational_exp_lower
from privstream.validation import check_int

Scheme = Literal["bgr", "dsr", "bdr", "cnr"]
SCHEMES: tuple[Scheme, ...] = ("bgr", "dsr", "bdr", "cnr")

#: HeavyGuardian's exponential-decay base b = 1.08 (paper §2.4), kept as the exact rational 27/25.
DEFAULT_DECAY_BASE = Fraction(27, 25)
#: The code's default split α = ε₁/ε (the paper's recommended value is lost; docs/ldp.md).
DEFAULT_ALPHA = Fraction(1, 3)
#: CNR's light part: the released code's default λ_l = 5 (paper's value lost).
DEFAULT_LIGHT_CELLS = 5
#: DSR/BDR switch when the weakest heavy count is at most τ = 1 (the released code's threshold; docs/ldp.md).
EVICTION_THRESHOLD = 1
#: Every randomiser here is pure ε-LDP (paper §2, Def. 2.1): δ = 0.
LDP_DELTA = 0.0
#: Local DP's neighbour relation (Def. 2.1): the guarantee bounds the ratio of one report's output
#: distributions for any two inputs; releases are post-processing of the reports.
LDP_NEIGHBOUR_RELATION = (
    "local DP: any two items v, v' of one report (one client's item at one time), every other report "
    "unchanged; the public warm-up (raw, warm_up_items) is not covered"
)


def _ratio(epsilon: Fraction, name: str) -> Fraction:
    """``e^epsilon`` rounded down to ``a/2^40`` (must exceed 1: the mechanism must randomise)."""
    ratio = rational_exp_lower(epsilon)
    if ratio <= 1:
        raise ValueError(f"{name}: too small (e^{name} rounds to 1 at 2^-{RATIO_DENOMINATOR_BITS})")
    return ratio


def _grr(ratio: Fraction, size: int) -> tuple[Fraction, Fraction]:
    """(p, q) of GRR with ratio ``e^ε`` on ``size`` values: p = r/(r+size−1), q = 1/(r+size−1)."""
    total = ratio + size - 1
    return ratio / total, 1 / total


def _as_rational(value: float | int | Fraction | Decimal, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction, Decimal)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    return Fraction(value)


@dataclass(frozen=True)
class HgLdpParams:
    """Public parameters of one HG-LDP deployment (validated; bad values fail naming the parameter).

    ``domain_size`` d: items are the ints ``0..d−1``; ``k``: the Top-k size, = λ_h (w = 1, paper §3);
    ``light_cells`` λ_l: only CNR uses a light part (0 otherwise); ``alpha`` = ε₁/ε (BDR, CNR);
    ``decay_base`` b > 1 rational (1.08 = 27/25).
    """

    scheme: Scheme
    epsilon: float | int | Fraction | Decimal
    domain_size: int
    k: int
    alpha: Fraction = DEFAULT_ALPHA
    light_cells: int | None = None
    decay_base: Fraction = DEFAULT_DECAY_BASE
    ratio: Fraction = field(init=False, repr=False)
    ratio1: Fraction = field(init=False, repr=False)
    ratio2: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme: must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        eps = _as_rational(self.epsilon, "epsilon")
        if eps <= 0:
            raise ValueError(f"epsilon: must be > 0, got {self.epsilon!r}")
        k = check_int("k", self.k, minimum=2)
        d = check_int("domain_size", self.domain_size, minimum=2)
        if d < k + 2:
            raise ValueError(
                f"domain_size: must be >= k + 2 = {k + 2} (a cold domain of >= 2 items), got {d}"
            )
        alpha = _as_rational(self.alpha, "alpha")
        if not 0 < alpha < 1:
            raise ValueError(f"alpha: must lie strictly between 0 and 1, got {self.alpha!r}")
        base = _as_rational(self.decay_base, "decay_base")
        if base <= 1:
            raise ValueError(f"decay_base: must be > 1, got {self.decay_base!r}")
        light = self.light_cells
        if light is None:
            light = DEFAULT_LIGHT_CELLS if self.scheme == "cnr" else 0
        light = check_int("light_cells", light, minimum=1 if self.scheme == "cnr" else 0)
        if self.scheme != "cnr" and light != 0:
            raise ValueError(
                f"light_cells: only CNR uses a light part (λ_l = 0 for {self.scheme}), got {light}"
            )
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "decay_base", base)
        object.__setattr__(self, "light_cells", light)
        object.__setattr__(self, "ratio", _ratio(eps, "epsilon"))  # GRR's a/2^40 for ε
        object.__setattr__(self, "ratio1", _ratio(eps * alpha, "epsilon1"))
        object.__setattr__(self, "ratio2", _ratio(eps * (1 - alpha), "epsilon2"))

    @property
    def ratio_epsilon(self) -> Fraction:
        """ε as an exact rational (GRR built from it has exactly :attr:`ratio`)."""
        return Fraction(self.epsilon)

    @property
    def ratio1_epsilon(self) -> Fraction:
        """ε₁ = α·ε, exact."""
        return Fraction(self.epsilon) * self.alpha

    @property
    def ratio2_epsilon(self) -> Fraction:
        """ε₂ = ε − ε₁, exact."""
        return Fraction(self.epsilon) * (1 - self.alpha)

    # --- BGR / DSR (whole ε on one GRR) -------------------------------------------------------
    @property
    def grr_full(self) -> tuple[Fraction, Fraction]:
        """(p, q) of GRR on the whole domain D (BGR; DSR's full mode)."""
        return _grr(self.ratio, self.domain_size)

    @property
    def grr_shrunk(self) -> tuple[Fraction, Fraction]:
        """(p_s, q_s) of GRR on H ∪ {⊥}, |H ∪ {⊥}| = λ_h + 1 (DSR's shrunk mode)."""
        return _grr(self.ratio, self.k + 1)

    # --- BDR / CNR (ε₁ + ε₂) --------------------------------------------------------------------
    @property
    def m1(self) -> tuple[Fraction, Fraction]:
        """(p1, q1): M1 keeps the bit [v ∈ H] with probability p1."""
        return _grr(self.ratio1, 2)

    @property
    def m2(self) -> tuple[Fraction, Fraction]:
        """(p2, q2): GRR within H (λ_h values)."""
        return _grr(self.ratio2, self.k)

    @property
    def m3(self) -> tuple[Fraction, Fraction]:
        """(p3, q3): GRR within D∖H (d − λ_h values)."""
        return _grr(self.ratio2, self.domain_size - self.k)

    def eq2_denominator(self) -> Fraction:
        """Eq. (2)'s denominator ``p1·(p2 − q2)`` (independent of d)."""
        p1, _ = self.m1
        p2, q2 = self.m2
        return p1 * (p2 - q2)

    def eq2_offset(self, gamma_h: Fraction) -> Fraction:
        """Eq. (2)'s per-report offset ``γ_h·p1·q2 + (1 − γ_h)·q1/λ_h`` (E[hits on h] from others)."""
        p1, q1 = self.m1
        _, q2 = self.m2
        return gamma_h * p1 * q2 + (1 - gamma_h) * q1 / self.k

    @property
    def effective_epsilon(self) -> float:
        """The realised ε' ≤ ε of one report: ln r (BGR, DSR) or ln r1 + ln r2 (BDR, CNR)."""
        if self.scheme in ("bgr", "dsr"):
            return _ln(self.ratio)
        return _ln(self.ratio1) + _ln(self.ratio2)

    @property
    def public(self) -> dict[str, str]:
        """The parameters a report carries (exact ratios, so the server rebuilds identical p, q)."""
        out = {
            "domain_size": str(self.domain_size),
            "k": str(self.k),
            "decay_base": str(self.decay_base),
            "effective_epsilon": repr(self.effective_epsilon),
        }
        if self.scheme in ("bgr", "dsr"):
            out["epsilon_ratio"] = str(self.ratio)
        else:
            out["epsilon1_ratio"] = str(self.ratio1)
            out["epsilon2_ratio"] = str(self.ratio2)
        if self.scheme == "cnr":
            out["light_cells"] = str(self.light_cells)
        return out


def alpha_argument(text: str) -> Fraction:
    """``--alpha`` of the command lines: a fraction strictly between 0 and 1 (argparse names the
    option in its error: ``argument --alpha: ...``)."""
    try:
        alpha = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a fraction such as 1/3, got {text!r}") from None
    if not 0 < alpha < 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text!r}")
    return alpha


def _ln(ratio: Fraction) -> float:
    return math.log(ratio.numerator) - math.log(ratio.denominator)
