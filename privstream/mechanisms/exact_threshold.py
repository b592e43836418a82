"""The exact-count reference: thresholded discrete Laplace(1/ε) on an exact histogram.

For :class:`~privstream.sketches.ExactHistogram` (build ``EXACT``): every stored (non-zero) count
gets independent two-sided geometric noise Z_x with scale 1/ε (Pr[Z = z] ∝ e^{−ε|z|}); noisy values
>= T are released (inclusive), sorted by the universe's order. This is the stability-based sparse
histogram that Lebeda–Tětek §1 call the non-streaming setting (error O(log(1/δ)/ε), no sketch term).

**Privacy** ((ε, δ)-DP for one event added or removed). Neighbouring histograms differ in one key x
by exactly 1. If x is stored in both, the outputs differ by a sensitivity-1 geometric mechanism on
one coordinate (ε-DP; thresholding is post-processing). If x is stored only in the larger one, its
count there is 1 and it is released only if 1 + Z_x >= T, with probability Pr[Z >= T − 1] <= δ;
otherwise both outputs have the same law. T is the smallest integer >= 2 with
Pr[Z >= T − 1] = α^{T−1}/(1+α) <= δ, α = e^{−ε} — the thresholded Laplace(k/ε) calibration of
:mod:`privstream.mechanisms.laplace_threshold` at k = 1 (C(ε, 1) = 1), whose functions this reuses.

**Error bound.** The noise of d counts lies in [−b, b] with probability >= 1 − β when
d·Pr[|Z| > b] <= β. With a declared ``domain`` (d = its size; stored keys outside it are dropped, as
for the other domain mechanisms) the bound holds simultaneously for every item. Without one there
is no public bound on the number of distinct items, so the bound is stated for **each item
separately** (d = 1) and the derivation says so. An unreleased item has f(x) <= T − 1 + b.
"""

from __future__ import annotations

from privstream.mechanisms.laplace_threshold import laplace_threshold, laplace_threshold_release
from privstream.mechanisms.registry import EXACT_COUNTS, Calibration, Mechanism, PrivacyMap, Request
from privstream.mechanisms.release_types import ErrorBound
from privstream.noise.distributions import discrete_laplace_abs_tail, smallest_abs_bound
from privstream.noise.rng import RandomSource
from privstream.sketches import Key


def exact_threshold(epsilon: float, delta: float) -> int:
    """T: the smallest integer >= 2 with Pr[Z >= T − 1] <= δ, Z discrete Laplace(1/ε)."""
    return laplace_threshold(epsilon, delta, 1)


def _calibrate(request: Request) -> Calibration:
    eps = request.budget.epsilon
    thr = exact_threshold(eps, request.budget.delta)
    items = 1 if request.domain is None else request.domain.size
    b = smallest_abs_bound(lambda m: discrete_laplace_abs_tail(m, 1.0 / eps), items, request.beta)
    scope = (
        "each item separately (no declared domain)"
        if request.domain is None
        else f"all {items} items of the declared domain at once"
    )
    bound = ErrorBound(
        below=float(thr - 1 + b),
        above=float(b),
        beta=request.beta,
        sketch_term=request.sketch_term,
        derivation=f"{items}·Pr[|Z|>b]<=beta with b={b}, for {scope}; unreleased items have f <= T-1+b, T={thr}",
    )
    return Calibration(bound, (("threshold", thr), ("scale", "1/eps")), thr)


def _sample(counters: dict[Key, int], request: Request, calibration: Calibration, rng: RandomSource) -> tuple:
    if request.domain is not None:
        domain = request.domain
        counters = {domain.item(pos): c for pos, c in domain.restrict(counters).items()}  # type: ignore[arg-type]
    return laplace_threshold_release(counters, request.budget.epsilon, calibration.noise, 1, rng)


MECHANISM = Mechanism(
    name="exact_threshold",
    title="thresholded discrete Laplace(1/ε) on exact counts",
    structure=EXACT_COUNTS,
    calibrate=_calibrate,
    sample=_sample,
    privacy=PrivacyMap(
        pure=False,
        theorem="stability-based sparse histogram: geometric mechanism on the shared key (sensitivity 1) "
        "+ Pr[Z >= T-1] <= delta for the one key only one side stores (privstream.mechanisms.exact_threshold)",
    ),
)
