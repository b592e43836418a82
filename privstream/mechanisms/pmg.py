"""Private Misra–Gries (Lebeda–Tětek Alg. 2) with discrete (geometric) noise, §5.2, and the §5.1
variant for standard MG sketches.

Noise: one shared η and one fresh Z_x per stored slot, all i.i.d. discrete Laplace with scale 1/ε
(the two-sided geometric with α = e^{−ε}: Pr[Z = z] = (1−α)/(1+α)·α^{|z|}); every one of the k
slots gets c_x + η + Z_x, zero-count and dummy slots included; keys with noisy value >= the
threshold are kept (inclusive); dummies are dropped after thresholding; output sorted by item order.

Thresholds (Pr[Z >= m] = α^m/(1+α) for m >= 1):

* Alg. 1 sketch (§5.2): T = 1 + 2t', t' = ⌈ln(6e^ε/((e^ε+1)δ))/ε⌉. A key outside T ∩ T' has
  count <= 1, so it passes only if η + Z_x >= 2t', i.e. one of its two samples is >= t'; Lemma 5
  counts 6 such samples (4 keys + 2 shared), and 6·Pr[Z >= t'] <= δ. We evaluate the closed form,
  then *verify* 6·Pr[Z >= t'] <= δ numerically and increase t' if float rounding made it fail.
* Standard MG (§5.1): up to k keys differ (e.g. k keys of count 1 vs. an empty sketch) and all lie
  on one side (one extra decrement removes count-1 keys; otherwise one key differs), so k + 1
  samples (k keys + one shared) must stay below t': t' = min{m : (k+1)·Pr[Z >= m] <= δ}.

Privacy on the common keys is Lemma 3 / Cor. 4 with the geometric mechanism in place of Laplace
(condition on the shared noise for a one-counter change, on the per-key noise for an all-k change:
each is a 1-D sensitivity-1 geometric mechanism, ε-DP). Lemma 5 adds δ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from privstream.mechanisms.common import (
    add_laplace,
    check_delta,
    check_epsilon,
    laplace_scale,
    threshold_and_sort,
)
from privstream.mechanisms.order_statistics import TopNoiseLevels
from privstream.mechanisms.registry import (
    Calibration,
    Mechanism,
    PrivacyMap,
    Request,
    Structure,
)
from privstream.mechanisms.release_types import ErrorBound
from privstream.noise.discrete import _discrete_laplace
from privstream.noise.distributions import (
    discrete_laplace_abs_tail,
    discrete_laplace_tail,
    smallest_abs_bound,
    smallest_satisfying,
)
from privstream.noise.rng import RandomSource
from privstream.sketches import Key


def smallest_tail_index(samples: int, epsilon: float, delta: float, start: int) -> int:
    """Smallest m >= 1 with samples·Pr[Z >= m] <= δ, Z two-sided geometric with scale 1/ε."""
    return smallest_satisfying(lambda m: samples * discrete_laplace_tail(m, 1.0 / epsilon) <= delta, 1, start)


def log_samples_over_delta(samples: int, eps: float, delta: float) -> float:
    """ln(samples·e^ε/((e^ε+1)δ)), written without e^ε so that large ε cannot overflow."""
    return math.log(samples) - math.log1p(math.exp(-eps)) - math.log(delta)


def pmg_half_threshold(epsilon: float, delta: float) -> int:
    """t' of §5.2: ⌈ln(6e^ε/((e^ε+1)δ))/ε⌉, verified so that 6·Pr[Z >= t'] <= δ."""
    eps, dlt = check_epsilon(epsilon), check_delta(delta)
    closed = math.ceil(log_samples_over_delta(6, eps, dlt) / eps)
    if closed >= 1 and 6 * discrete_laplace_tail(closed, 1.0 / eps) <= dlt:
        return closed
    return smallest_tail_index(6, eps, dlt, closed)  # only if float rounding broke the closed form


def pmg_threshold(epsilon: float, delta: float) -> int:
    """Inclusive threshold of discrete PMG on an Alg. 1 sketch: 1 + 2⌈ln(6e^ε/((e^ε+1)δ))/ε⌉ (§5.2)."""
    return 1 + 2 * pmg_half_threshold(epsilon, delta)


#: Zero-count slots up to this many are noised one by one; above it only the few whose noise can
#: reach the threshold are generated (:func:`_zero_slots_over`).
NAIVE_ZERO_SLOTS = 2048


def pmg_release(
    slots: Sequence[tuple[Key, int]], epsilon: float, threshold: int, rng: RandomSource
) -> tuple[tuple[Key, int], ...]:
    """Alg. 2 core: shared η + per-slot Z on every slot, inclusive threshold, dummies dropped.

    The slots with count 0 (zero-count keys and dummies, most of a large sketch) all have value
    η + Z_x, and one is released only if Z_x >= T − η. Their noises are i.i.d. and independent of η
    and of the other slots, so — given η — the released zero slots have exactly the law of the top
    order statistics of N i.i.d. discrete Laplace values that are >= T − η, on a uniformly random
    subset of the N zero slots (exchangeability). :func:`_zero_slots_over` samples exactly that
    (the exact order-statistics sampler of :mod:`privstream.mechanisms.order_statistics`, as for the
    domain-wide top-k), so the output law is that of noising every slot, at a cost in the number of
    positive slots. With few zero slots, or T − η <= 0 (a case split on the already drawn η), every
    slot is noised one by one."""
    scale = laplace_scale(1, epsilon)
    eta = _discrete_laplace(scale.numerator, scale.denominator, rng)
    zeros = [x for x, c in slots if c == 0]
    level = threshold - eta
    if len(zeros) <= NAIVE_ZERO_SLOTS or level <= 0:
        return threshold_and_sort(add_laplace(((x, c + eta) for x, c in slots), scale, rng), threshold)
    noisy = add_laplace(((x, c + eta) for x, c in slots if c != 0), scale, rng)
    noisy += [(x, eta + z) for x, z in _zero_slots_over(zeros, level, scale, rng)]
    return threshold_and_sort(noisy, threshold)


def _zero_slots_over(
    zeros: Sequence[Key], level: int, scale: Fraction, rng: RandomSource
) -> list[tuple[Key, int]]:
    """The zero slots whose noise Z_x >= ``level`` (> 0), with their Z_x: the noise values >= level
    among len(zeros) i.i.d. discrete Laplace(scale) in decreasing order (exact order statistics),
    each on a distinct uniformly random zero slot (rejection sampling with ``rng.randbelow``)."""
    generator = TopNoiseLevels(len(zeros), scale, rng)
    values = []
    while generator.generated < len(zeros):
        z = generator.next()
        if z < level:
            break
        values.append(z)
    taken: set[int] = set()
    out = []
    for z in values:
        while True:
            pos = rng.randbelow(len(zeros))
            if pos not in taken:
                break
        taken.add(pos)
        out.append((zeros[pos], z))
    return out


def pmg_error_bound(epsilon: float, threshold: int, k: int, beta: float, sketch_term: str) -> ErrorBound:
    """Thm 8 / Lemma 7 for the discrete variant: all k+1 samples lie in [−b, b] w.p. >= 1−β with
    (k+1)·Pr[|Z| > b] <= β, so a released value is c_x ± 2b, and an unreleased stored key has
    c_x + noise <= T − 1, i.e. c_x <= T − 1 + 2b. With c_x ∈ [f(x) − n/(k+1), f(x)] (Fact 1)."""
    b = smallest_abs_bound(lambda m: discrete_laplace_abs_tail(m, 1.0 / epsilon), k + 1, beta)
    return ErrorBound(
        below=float(threshold - 1 + 2 * b),
        above=float(2 * b),
        beta=beta,
        sketch_term=sketch_term,
        derivation=f"Lebeda-Tetek Thm 8 (discrete): b={b} with (k+1)Pr[|Z|>b]<=beta, threshold {threshold}",
    )


# ---- the registered mechanism ----------------------------------------------------------------------


@dataclass(frozen=True)
class PMGNoise:
    """Calibrated PMG: discrete Laplace scale 1/``epsilon`` (shared + per slot), inclusive ``threshold``."""

    epsilon: float
    threshold: int


def pmg_calibration(request: Request, threshold: int, per: str) -> Calibration:
    """PMG with ``threshold`` (§5.2 for Alg. 1, §5.1 for standard MG): its Thm 8 error bound."""
    eps = request.budget.epsilon
    return Calibration(
        pmg_error_bound(eps, threshold, request.k, request.beta, request.sketch_term),
        (("threshold", threshold), ("noise", f"two-sided geometric, scale 1/eps, shared + per-{per}")),
        PMGNoise(eps, threshold),
    )


def _calibrate(request: Request) -> Calibration:
    return pmg_calibration(request, pmg_threshold(request.budget.epsilon, request.budget.delta), "slot")


def _slots(sketch: object) -> list[tuple[Key, int]]:
    """Every one of the k slots (zero-count keys and dummies included): what Alg. 2 noises."""
    return sketch.slots()  # type: ignore[attr-defined]


def pmg_sample(
    slots: Sequence[tuple[Key, int]], request: Request, calibration: Calibration, rng: RandomSource
) -> tuple:
    noise: PMGNoise = calibration.noise
    return pmg_release(slots, noise.epsilon, noise.threshold, rng)


MECHANISM = Mechanism(
    name="pmg",
    title="Lebeda-Tetek Alg. 2",
    structure=Structure(
        lambda g: g.sequential_mg and g.alg1_slots,
        "a sequentially built Alg. 1 sketch (Lemma 2 with k slots: at most 2 stored keys differ per side)",
        " (§7: PMG must not be applied to merged sketches; use gshm or laplace_threshold)",
    ),
    calibrate=_calibrate,
    sample=pmg_sample,
    prepare=_slots,
    privacy=PrivacyMap(
        pure=False,
        theorem="Lebeda-Tetek Thm 8: Lemma 3 / Cor. 4 on the common keys, Lemma 5 for the <= 4 others; "
        "geometric noise and threshold of §5.2",
    ),
)
