"""Private Misra–Gries release (Lebeda–Tětek, "Better Differentially Private Approximate Histograms
and Heavy Hitters using the Misra-Gries Sketch", Alg. 2 with the discrete noise of §5.2 and the
standard-MG threshold of §5.1): thresholds, calibration and the shared-noise structure of the
release, each against an independent computation.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py pmg``).

* Thresholds. With Z two-sided geometric of scale 1/ε (α = e^{−ε}, Pr[Z ≥ m] = α^m/(1+α) for
  m ≥ 1), the half threshold t' is the smallest m ≥ 1 with s·Pr[Z ≥ m] ≤ δ: s = 6 for an Alg. 1
  sketch (§5.2, Lemma 5), s = k + 1 for a standard MG sketch (§5.1); the threshold is 1 + 2t'.
  The reference is a plain search over that tail formula in 100-digit decimal arithmetic, so it
  does not share the code's floating-point closed form. Some inputs sit exactly on a float
  rounding boundary of the closed form ⌈ln(s·e^ε/((e^ε+1)δ))/ε⌉ (δ one ulp from s·Pr[Z ≥ m]):
  there the code must verify the closed form and repair it, and the exact reference tells whether
  it did.
* Release. The only draw ``pmg_release`` makes itself is the shared η (the per-slot noise comes
  from ``add_laplace`` and the order-statistics sampler), so some tests script η and use ε = 40:
  a per-slot draw is then 0 except with probability 2α/(1+α) < 10^{−17}, and the release is the
  thresholded c + η itself. Others record which slots reach the per-slot noising and the
  order-statistics sampler (the path switch is documented: up to NAIVE_ZERO_SLOTS zero slots, or
  T − η ≤ 0, every slot is noised one by one). One statistical test checks the shared η through
  the output alone (fixed seed; its false-failure rate is stated there).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

import privstream.mechanisms.pmg as pmg_module
from privstream.accounting import Budget
from privstream.mechanisms.pmg import (
    NAIVE_ZERO_SLOTS,
    PMGNoise,
    log_samples_over_delta,
    pmg_half_threshold,
    pmg_release,
    pmg_threshold,
)
from privstream.mechanisms.pmg_standard import MECHANISM as PMG_STANDARD
from privstream.mechanisms.pmg_standard import pmg_standard_threshold
from privstream.mechanisms.registry import Request
from privstream.noise.rng import SeededRandomSource

PMG = pmg_module.MECHANISM


# ---- independent references ------------------------------------------------------------------------


def _exact_tail_ok(samples: int, eps: float, delta: float, m: int) -> bool:
    """samples·Pr[Z >= m] <= δ for m >= 1, Pr[Z >= m] = α^m/(1+α), in 100-digit arithmetic (ε and δ
    are read as the exact binary fractions they are)."""
    with localcontext() as ctx:
        ctx.prec = 100
        e = Decimal(eps)
        return samples * (-(e * m)).exp() / (1 + (-e).exp()) <= Decimal(delta)


def _exact_tail_index(samples: int, eps: float, delta: float) -> int:
    """The smallest m >= 1 with samples·Pr[Z >= m] <= δ: a plain search over the tail formula,
    started near the real-number solution (only so that ε = 2^-50, where m is about 10^16, ends)."""
    with localcontext() as ctx:
        ctx.prec = 100
        e, d = Decimal(eps), Decimal(delta)
        m = max(1, int((samples * e.exp() / ((e.exp() + 1) * d)).ln() / e) - 3)
    while not _exact_tail_ok(samples, eps, delta, m):
        m += 1
    while m > 1 and _exact_tail_ok(samples, eps, delta, m - 1):
        m -= 1
    return m


def _exact_noise_radius(eps: float, count: int, beta: float) -> int:
    """Thm 8 / Lemma 7, discrete: the smallest b >= 0 with count·Pr[|Z| > b] <= β, where
    Pr[|Z| > b] = Pr[|Z| >= b + 1] = 2α^(b+1)/(1+α); a plain loop."""
    b = 0
    while not _exact_tail_ok(2 * count, eps, beta, b + 1):
        b += 1
    return b


# ---- log_samples_over_delta -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "eps", "delta"), [(6, 1.0, 1e-6), (6, 0.1, 1e-9), (101, 0.5, 1e-6), (2, 3.0, 0.05)]
)
def test_log_samples_over_delta_is_the_closed_forms_logarithm(samples: int, eps: float, delta: float) -> None:
    """ln(s·e^ε/((e^ε+1)δ)): the argument of the §5.1/§5.2 closed forms (with s = 6 it is
    ln(6e^ε/((e^ε+1)δ)) of §5.2), computed here directly."""
    expected = math.log(samples * math.exp(eps) / ((math.exp(eps) + 1) * delta))
    assert log_samples_over_delta(samples, eps, delta) == pytest.approx(expected, rel=1e-12)


def test_log_samples_over_delta_does_not_overflow_at_large_epsilon() -> None:
    """e^ε/(e^ε+1) -> 1, so at ε = 800 (e^ε overflows a float) the value is ln(s/δ)."""
    assert log_samples_over_delta(6, 800.0, 1e-6) == pytest.approx(math.log(6 / 1e-6), rel=1e-12)


# ---- thresholds -----------------------------------------------------------------------------------

# (ε, δ): ordinary settings (the first three: thresholds 33, 91, 301), then float rounding
# boundaries of the closed form. δ one ulp below 6·Pr[Z >= 114] as a float: the closed form gives
# 114, which fails 6·Pr[Z >= 114] <= δ, so t' = 115. δ = 6·Pr[Z >= 182] (and 6·Pr[Z >= 15] at
# ε = 2) as a float: the closed form gives 183 (16), the float test of 182 (15) passes with
# equality, the exact one fails. ε = 2^-50: consecutive float tails are equal, and the float test
# passes with equality at the closed form and at the m below it, which the exact test rejects.
HALF_CASES = [
    (1.0, 1e-6),
    (0.5, 1e-9),
    (0.1, 1e-6),
    (2.0, 1e-9),
    (0.03, 0.09960925399478292),
    (0.03, 0.012952062888503316),
    (2.0, 4.945300180663885e-13),
    (2.0**-50, 0.0009999999999999996),
]


@pytest.mark.parametrize(("eps", "delta"), HALF_CASES)
def test_half_threshold_is_the_smallest_m_with_six_tails_below_delta(eps: float, delta: float) -> None:
    """§5.2 (Lemma 5 counts 6 samples: 4 keys outside T ∩ T' and 2 shared): t' is the smallest
    m >= 1 with 6·Pr[Z >= m] <= δ, and the inclusive threshold is 1 + 2t'."""
    expected = _exact_tail_index(6, eps, delta)
    assert pmg_half_threshold(eps, delta) == expected
    assert pmg_threshold(eps, delta) == 1 + 2 * expected


def test_threshold_values_at_three_settings() -> None:
    """1 + 2⌈ln(6e^ε/((e^ε+1)δ))/ε⌉ by hand: ε=1, δ=1e-6: ln(6e/(e+1)·10^6)=15.29 -> 33;
    ε=0.5, δ=1e-9: 44.2 -> 91; ε=0.1, δ=1e-6: 149.3 -> 301."""
    assert [pmg_threshold(*c) for c in HALF_CASES[:3]] == [33, 91, 301]


# (ε, δ, k): ordinary settings, then t' = 1 (ε = 10: 2·Pr[Z >= 1] = 2/(e^10+1) < 10^-4), then
# δ = 2·Pr[Z >= 6] exactly as a float (the inclusive comparison decides), then a δ where the
# closed-form start overshoots the smallest m by one.
STANDARD_CASES = [
    (1.0, 1e-6, 100),
    (0.5, 1e-9, 1000),
    (0.1, 1e-6, 10_000),
    (10.0, 1e-4, 1),
    (0.5, 0.0619808505575232, 1),
    (0.03, 0.055292804537546786, 1),
]


@pytest.mark.parametrize(("eps", "delta", "k"), STANDARD_CASES)
def test_standard_threshold_is_the_smallest_m_with_k_plus_one_tails_below_delta(
    eps: float, delta: float, k: int
) -> None:
    """§5.1: up to k keys differ, all on one side, so k + 1 samples (k keys and the shared one)
    must stay below t': t' = min{m >= 1 : (k+1)·Pr[Z >= m] <= δ}, threshold 1 + 2t'."""
    assert pmg_standard_threshold(eps, delta, k) == 1 + 2 * _exact_tail_index(k + 1, eps, delta)


def test_standard_threshold_at_large_epsilon_is_three() -> None:
    """t' = 1 is possible: 2·Pr[Z >= 1] = 2/(e^10+1) ≈ 9.1e-5 <= 10^-4, so the threshold is 3."""
    assert 2 / (math.exp(10.0) + 1) <= 1e-4
    assert pmg_standard_threshold(10.0, 1e-4, 1) == 3


@pytest.mark.parametrize(("eps", "delta"), [(1e300, 1e-6), (1e307, 1e-300), (1.7e308, 1e-6)])
def test_thresholds_at_huge_epsilon_are_three(eps: float, delta: float) -> None:
    """Any positive finite ε is accepted; at ε >= 10^300 a sample is >= 1 with probability
    1/(e^ε+1), far below every δ, so t' = 1 and both thresholds are 3 (with no overflow on the way,
    although ε·ln(9/δ) exceeds the largest float in the last two cases)."""
    assert pmg_standard_threshold(eps, delta, 8) == 3
    assert pmg_threshold(eps, delta) == 3


@pytest.mark.parametrize("k", [0, -3, 2.5, "8", True, None])
def test_standard_threshold_refuses_a_bad_k_with_a_value_error_naming_k(k: object) -> None:
    """k must be an int >= 1; every bad k (wrong type included) is a ValueError naming k."""
    with pytest.raises(ValueError, match=r"^k: must be an int"):
        pmg_standard_threshold(1.0, 1e-6, k)  # type: ignore[arg-type]


# ---- calibration ----------------------------------------------------------------------------------


def _request(k: int, eps: float, delta: float) -> Request:
    return Request(k, Budget(eps, delta), 0.05, None, "n/(k+1)")


@pytest.mark.parametrize(("mechanism", "samples", "per"), [(PMG, 6, "slot"), (PMG_STANDARD, None, "key")])
def test_calibration_reports_threshold_noise_and_error_bound(
    mechanism, samples: int | None, per: str
) -> None:
    """The calibration publishes the threshold 1 + 2t' and the noise description (shared η plus
    one sample per slot for an Alg. 1 sketch, per stored key for a standard sketch), samples
    with (ε, threshold), and reports Thm 8's interval for the discrete noise: all k + 1 samples in
    [−b, b] w.p. >= 1 − β, so below = T − 1 + 2b, above = 2b, with the request's sketch term."""
    k, eps, delta = 100, 1.0, 1e-6
    half = _exact_tail_index(samples if samples is not None else k + 1, eps, delta)
    threshold = 1 + 2 * half
    cal = mechanism.calibrate(_request(k, eps, delta))
    assert cal.parameters == (
        ("threshold", threshold),
        ("noise", f"two-sided geometric, scale 1/eps, shared + per-{per}"),
    )
    assert cal.noise == PMGNoise(eps, threshold)
    b = _exact_noise_radius(eps, k + 1, 0.05)
    bound = cal.error_bound
    assert (bound.below, bound.above, bound.beta) == (threshold - 1 + 2 * b, 2 * b, 0.05)
    assert bound.sketch_term == "n/(k+1)"


# ---- the release ----------------------------------------------------------------------------------

BIG_EPS = 40.0  # per-slot draws are 0 except with probability < 1e-17 (see the module docstring)


class _Recorder:
    """Wraps pmg's per-slot noising and its zero-slot sampler, recording what each receives."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, eta: int | None) -> None:
        self.per_slot: list[list[tuple[object, int]]] = []
        self.zero_sampler: list[tuple[list[object], int]] = []
        self.eta_draws = 0
        add_laplace, zero_slots_over = pmg_module.add_laplace, pmg_module._zero_slots_over

        def recording_add_laplace(counts, scale, rng):
            counts = list(counts)
            self.per_slot.append(counts)
            return add_laplace(counts, scale, rng)

        def recording_zero_slots_over(zeros, level, scale, rng):
            self.zero_sampler.append((list(zeros), level))
            return zero_slots_over(zeros, level, scale, rng)

        monkeypatch.setattr(pmg_module, "add_laplace", recording_add_laplace)
        monkeypatch.setattr(pmg_module, "_zero_slots_over", recording_zero_slots_over)
        if eta is not None:

            def scripted_eta(t: int, s: int, rng: object) -> int:
                self.eta_draws += 1
                return eta

            monkeypatch.setattr(pmg_module, "_discrete_laplace", scripted_eta)


def _zero_keys(n: int) -> list[tuple[object, int]]:
    return [(x, 0) for x in range(n)]


STORED = [(10**6, 20), (10**6 + 1, 7), (10**6 + 2, 1)]


def test_fast_path_adds_the_shared_eta_to_every_stored_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alg. 2: every slot gets c_x + η + Z_x. With more than NAIVE_ZERO_SLOTS zero slots and
    T − η > 0 the stored slots are noised one by one and the zero slots by order statistics; the
    stored slots still carry +η and are still released. η = 4, T = 10, per-slot noise 0: the
    release is {10^6: 24, 10^6+1: 11} (10^6+2 has 1 + 4 < 10; zero slots need Z >= 6)."""
    rec = _Recorder(monkeypatch, eta=4)
    slots = _zero_keys(NAIVE_ZERO_SLOTS + 1) + STORED
    out = pmg_release(slots, BIG_EPS, 10, SeededRandomSource("pmg-fast-eta"))
    assert out == ((10**6, 24), (10**6 + 1, 11))
    assert rec.eta_draws == 1


def test_fast_path_noises_stored_slots_and_samples_exactly_the_zero_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """η = −2, T = 3 (level T − η = 5): the stored slots reach the per-slot noise as c + η, and the
    order-statistics sampler gets exactly the zero-count slots (in slot order) and the level."""
    rec = _Recorder(monkeypatch, eta=-2)
    zeros = _zero_keys(NAIVE_ZERO_SLOTS + 1)
    slots = zeros[:1000] + STORED + zeros[1000:]
    pmg_release(slots, BIG_EPS, 3, SeededRandomSource("pmg-record"))
    assert rec.per_slot == [[(x, c - 2) for x, c in STORED]]
    assert rec.zero_sampler == [([x for x, _ in zeros], 5)]


def test_exactly_naive_zero_slots_are_noised_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """NAIVE_ZERO_SLOTS zero slots ("up to this many are noised one by one"): every slot, zero
    slots included, gets its own draw as c + η; the order-statistics sampler is not used."""
    rec = _Recorder(monkeypatch, eta=0)
    slots = _zero_keys(NAIVE_ZERO_SLOTS) + STORED
    assert pmg_release(slots, BIG_EPS, 5, SeededRandomSource("pmg-naive")) == ((10**6, 20), (10**6 + 1, 7))
    assert rec.per_slot == [slots]
    assert rec.zero_sampler == []


@pytest.mark.parametrize(("eta", "fast"), [(5, False), (4, True), (6, False)])
def test_level_switch_is_at_threshold_minus_eta_zero(
    monkeypatch: pytest.MonkeyPatch, eta: int, fast: bool
) -> None:
    """T = 5 and more than NAIVE_ZERO_SLOTS zero slots: T − η <= 0 (η = 5, 6) noises every slot
    one by one; T − η = 1 (η = 4) uses the order-statistics sampler at level 1."""
    rec = _Recorder(monkeypatch, eta=eta)
    slots = _zero_keys(NAIVE_ZERO_SLOTS + 1) + STORED
    out = pmg_release(slots, BIG_EPS, 5, SeededRandomSource(f"pmg-level-{eta}"))
    if fast:
        assert rec.per_slot == [[(x, c + eta) for x, c in STORED]]
        assert rec.zero_sampler == [([x for x, _ in slots[:-3]], 1)]
    else:
        assert rec.per_slot == [[(x, c + eta) for x, c in slots]]
        assert rec.zero_sampler == []
        assert len(out) == len(slots)  # every slot reaches T: c + η >= 5


def test_zero_count_slots_are_released_and_count_one_slots_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """More than NAIVE_ZERO_SLOTS slots of count 0 *and* of count 1, ε = 1, η = 1, T = 3: a zero
    slot is released iff Z >= 2 (probability e^-2/(1+e^-1) ≈ 0.099: about 208 of 2100), a count-1
    slot iff Z >= 1 (≈ 0.269: about 565 of 2100), each key at most once. Bands of ±6 standard
    deviations (false-failure rate < 1e-8; fixed seed)."""
    _Recorder(monkeypatch, eta=1)
    n = NAIVE_ZERO_SLOTS + 52
    slots = _zero_keys(n) + [(10**6 + i, 1) for i in range(n)]
    out = pmg_release(slots, 1.0, 3, SeededRandomSource("pmg-zero-and-one"))
    keys = [x for x, _ in out]
    assert len(keys) == len(set(keys))
    p0, p1 = math.exp(-2) / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))
    zero_released = sum(1 for x in keys if x < 10**6)
    one_released = len(keys) - zero_released
    for count, p in ((zero_released, p0), (one_released, p1)):
        assert abs(count - n * p) <= 6 * math.sqrt(n * p * (1 - p))


def test_shared_eta_links_stored_slots_and_zero_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """One η is added to every slot, so a stored slot's released value (c + η + Z) and the number
    of released zero slots (each released iff Z_x >= T − η) rise and fall together: positive
    correlation over releases. Noise is not scripted; the zero-slot switch is lowered to 100 (300
    zero slots) so that 200 releases stay quick and take the order-statistics path (as in
    tests/test_mechanisms_pmg_zero_slots.py). The population correlation is about 0.33, so the
    sample correlation over 200 releases is <= 0.1 with probability below 1e-3; fixed seed."""
    monkeypatch.setattr(pmg_module, "NAIVE_ZERO_SLOTS", 100)
    slots = _zero_keys(300) + [(10**6, 50)]
    rng = SeededRandomSource("pmg-shared-eta")
    stored, zeros_released = [], []
    for _ in range(200):
        out = dict(pmg_release(slots, 1.0, 5, rng))
        assert 10**6 in out  # 50 + η + Z >= 5 fails with probability ~e^-45
        stored.append(out.pop(10**6))
        zeros_released.append(len(out))
    assert np.corrcoef(stored, zeros_released)[0, 1] > 0.1
