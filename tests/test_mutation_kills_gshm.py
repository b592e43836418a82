"""GSHM (Lebeda–Tětek Thm 8.5) release: which counts are noised, the reported parameters, and the
error bound's noise radius, each against an independent computation.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py gshm``); the σ and τ the
release samples with are checked in tests/test_noise_parameters_recorded.py.

Deterministic: a σ² of 10⁻⁶ makes every discrete Gaussian draw 0 except with probability below
2·e^{−1/(2·10⁻⁶)} (about 10^{−217000}), so the release is the thresholded counts themselves; nothing
else here is random.

Also: zcdp_profile against a plain-Python minimisation over α, Thm 8.5's right-hand side term by
term for a profile where the middle term decides, the calibration's search re-run from its
description, and check_epsilon / check_delta on the edge inputs. Every calibration in this file is
bounded (the autouse ``_calibration_stays_bounded``), so a search that runs away fails at once
instead of growing σ until the discrete Gaussian tables exhaust memory.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import privstream.mechanisms.gshm as gshm_module
from privstream.accounting import Budget
from privstream.mechanisms import calibrate_gshm, release
from privstream.mechanisms.common import check_delta, check_epsilon, laplace_scale
from privstream.mechanisms.gshm import GSHMParameters, _condition, gshm_release, zcdp_profile
from privstream.noise import SeededRandomSource
from privstream.sketches import StandardMisraGries, merge_in_order

TINY = Fraction(1, 10**6)


@pytest.fixture(autouse=True)
def _calibration_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every σ² the calibration tries (through smallest_tau_discrete) is at most 10⁶ (σ <= 1000;
    these tests need σ² below 6000) and a test tries at most 300: the search brackets the smallest
    feasible σ and scans upward only while τ + b does not get worse, so it stops. A search that
    runs away fails here instead of building ever larger discrete Gaussian tables."""
    inner = gshm_module.smallest_tau_discrete
    seen: list[float] = []

    def bounded(epsilon: float, delta: float, ell: int, sigma2: float) -> int | None:
        seen.append(sigma2)
        assert sigma2 <= 1e6 and len(seen) <= 300, f"calibration ran away: {len(seen)} σ², last {sigma2}"
        return inner(epsilon, delta, ell, sigma2)

    monkeypatch.setattr(gshm_module, "smallest_tau_discrete", bounded)
    yield


def params(tau: int) -> GSHMParameters:
    return GSHMParameters(sigma2=TINY, tau=tau, ell=8, epsilon=1.0, delta=1e-6, noise_bound=0, beta=0.05)


@pytest.mark.parametrize("as_list", [False, True])
def test_only_nonzero_counts_are_noised_and_kept_at_or_above_one_plus_tau(as_list: bool) -> None:
    counts = {"a": 1, "b": 0, "c": 5, "d": 3, "e": 2}
    given = list(counts.items()) if as_list else counts
    # tau = 0: keep noisy counts >= 1, so every non-zero count and never a zero one
    assert dict(gshm_release(given, params(0), SeededRandomSource(1))) == {"a": 1, "c": 5, "d": 3, "e": 2}
    # tau = 2: keep >= 3 exactly
    assert dict(gshm_release(given, params(2), SeededRandomSource(1))) == {"c": 5, "d": 3}
    assert params(2).threshold == 3


def _merged(k: int) -> StandardMisraGries:
    parts = []
    for seed in range(2):
        s = StandardMisraGries(k)
        s.update_batch([(seed * 7 + 3 * i) % 50 for i in range(400)] + [1] * 60 + [2] * 40)
        parts.append(s)
    return merge_in_order(parts)


def _gaussian_abs_tail(b: int, sigma2: float) -> float:
    """Pr[|Y| > b] for Y ~ N_Z(0, σ²), by summing the pmf (independent of privstream.noise)."""
    span = int(40 * math.sqrt(sigma2)) + 40
    w = [math.exp(-(y * y) / (2 * sigma2)) for y in range(-span, span + 1)]
    total = math.fsum(w)
    return math.fsum(wi for y, wi in zip(range(-span, span + 1), w, strict=True) if abs(y) > b) / total


@pytest.mark.parametrize("beta", [0.05, 0.3])
def test_the_release_reports_ell_and_a_noise_radius_for_its_own_beta(beta: float) -> None:
    k = 8
    out = release(_merged(k), Budget(1.0, 1e-6), mechanism="gshm", beta=beta, rng=SeededRandomSource(3))
    reported = dict(out.parameters)
    assert reported["l"] == k
    sigma2 = float(reported["sigma2"])
    # the smallest b with l·Pr[|Y| > b] <= beta (the Thm 8.12-style union bound over the l noises)
    b = next(b for b in range(10_000) if k * _gaussian_abs_tail(b, sigma2) <= beta)
    assert out.error_bound.beta == beta
    assert out.error_bound.above == b
    assert out.error_bound.below == reported["tau"] + b


def test_the_radius_depends_on_beta() -> None:
    """β is passed through to the calibration: a 6× larger β gives a smaller radius here."""
    assert calibrate_gshm(1.0, 1e-6, 8, 0.3).noise_bound < calibrate_gshm(1.0, 1e-6, 8, 0.05).noise_bound


def test_laplace_scale_is_sensitivity_over_epsilon() -> None:
    """The discrete Laplace scale t/s of an ε-DP count release with ℓ1 sensitivity Δ is Δ/ε."""
    assert laplace_scale(3, 0.5) == 6
    assert laplace_scale(Fraction(1, 2), 2) == Fraction(1, 4)
    assert laplace_scale(9, 0.75) == 12


# ---- calibrate_gshm against the law it states: the smallest error bound τ + b over σ² on a grid ---


def _first(pred, hi: int) -> int | None:  # type: ignore[no-untyped-def]
    """The smallest integer in [0, hi] where the monotone ``pred`` holds (plain bisection), or None."""
    if not pred(hi):
        return None
    lo = -1  # pred(hi), not pred(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(mid) else (mid, hi)
    return hi


def _objective(epsilon: float, delta: float, ell: int, s2: Fraction, beta: float = 0.05) -> int | None:
    """τ + b for noise N_Z(0, s2), computed here from the module's δ condition and the noise's tail
    (not through calibrate_gshm, smallest_tau_discrete or smallest_abs_bound); None if no τ up to
    60σ works."""
    from privstream.mechanisms.gshm import gshm_delta_discrete
    from privstream.noise.distributions import discrete_gaussian_abs_tail

    top = int(60 * math.sqrt(float(s2))) + 20
    tau = _first(lambda t: gshm_delta_discrete(epsilon, float(s2), t, ell) <= delta, top)
    if tau is None:
        return None
    b = _first(lambda m: ell * discrete_gaussian_abs_tail(m + 1, float(s2)) <= beta, top)  # Pr[|Y| > m]
    assert b is not None
    return tau + b


@pytest.mark.parametrize(
    ("epsilon", "delta", "ell"),
    # the second: the best σ is below 1; the last: so large a δ that τ = 0 meets the condition
    [(1.0, 1e-6, 4), (8.0, 1e-3, 1), (0.5, 1e-8, 16), (1.0, 0.9, 1)],
)
def test_calibration_is_the_best_sigma2_of_a_grid_and_reports_its_inputs(
    epsilon: float, delta: float, ell: int
) -> None:
    """The calibrated (σ², τ, b): σ² a multiple of 1/100; τ the smallest integer meeting the δ
    condition and b the smallest noise radius for that σ² (independent scans); the inputs reported
    unchanged; and no σ² on a geometric grid (ratio 1.05, σ from 0.3 to twice Lemma 8.6's
    √(2l·ln(2.5/δ))/ε) gives a smaller
    τ + b — the calibration searches σ from 0.05 up, so a best σ below 1 is found."""
    p = calibrate_gshm(epsilon, delta, ell)
    assert (p.ell, p.epsilon, p.delta, p.beta) == (ell, epsilon, delta, 0.05)
    assert (p.tau == 0) == (delta == 0.9)
    assert (p.sigma2 * 100).denominator == 1
    assert p.objective == p.tau + p.noise_bound == _objective(epsilon, delta, ell, p.sigma2)
    sigma, grid = 0.3, []
    while sigma < 2 * math.sqrt(2 * ell * math.log(2.5 / delta)) / epsilon:  # twice Lemma 8.6's σ
        grid.append(Fraction(math.ceil(sigma * sigma * 100), 100))
        sigma *= 1.05
    best = min(o for s2 in grid if (o := _objective(epsilon, delta, ell, s2)) is not None)
    assert p.objective <= best, (p, best)


def test_calibration_refuses_a_non_integer_ell_naming_it() -> None:
    with pytest.raises(ValueError, match="^ell"):
        calibrate_gshm(1.0, 1e-6, 2.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [1e-9, 1e-3, 0.9])
@pytest.mark.parametrize("sigma2", [0.0025, 0.3, 7.5, 400.0])  # σ from 0.05 (where the search starts) to 20
def test_smallest_tau_is_the_first_integer_meeting_the_condition(sigma2: float, delta: float) -> None:
    """``smallest_tau_discrete`` against a plain bisection of the same condition over [0, 60σ + 20]
    (None where no τ there meets it)."""
    from privstream.mechanisms.gshm import gshm_delta_discrete, smallest_tau_discrete

    top = int(60 * math.sqrt(sigma2)) + 20
    expected = _first(lambda t: gshm_delta_discrete(1.0, sigma2, t, 4) <= delta, top)
    assert smallest_tau_discrete(1.0, delta, 4, sigma2) == expected


def _theorem_8_5_terms(epsilon: float, sigma2: float, tau: int, ell: int) -> dict[object, float]:
    """Thm 8.5's right-hand side term by term, written out here from the paper with plain loops:
    1 − p^l; for each j, 1 − p^{l−j} + p^{l−j}·δ_j(ε − γ_j) and δ_j(ε + γ_j); γ_j = (l − j)·ln p,
    p = 1 − Pr[Y >= τ], δ_j the ρ = j/(2σ²) zCDP profile (the module's conservative discrete bound)."""
    from privstream.mechanisms.gshm import zcdp_profile
    from privstream.noise.distributions import discrete_gaussian_tail

    p = 1 - discrete_gaussian_tail(tau, sigma2)
    terms: dict[object, float] = {"none kept": 1 - p**ell}
    for j in range(1, ell + 1):
        gamma, rest = (ell - j) * math.log(p), p ** (ell - j)
        terms[("kept", j)] = (1 - rest) + rest * float(zcdp_profile(j / (2 * sigma2), epsilon - gamma))
        terms[("shifted", j)] = float(zcdp_profile(j / (2 * sigma2), epsilon + gamma))
    return terms


@pytest.mark.parametrize(
    ("epsilon", "sigma2", "tau", "ell", "binding"),
    [
        (1.0, 50.0, 10, 4, "none kept"),  # τ too low: the no-key-kept term decides
        (1.0, 50.0, 40, 4, None),  # the usual case: j = l, where the two per-j terms coincide (γ = 0)
        (0.5, 200.0, 60, 16, None),
        (0.05, 1.0, 1, 2, "shifted"),  # small ε and τ: δ_j(ε + γ_j) at j < l decides
    ],
)
def test_the_delta_condition_is_theorem_8_5_term_by_term(
    epsilon: float, sigma2: float, tau: int, ell: int, binding: str | None
) -> None:
    """gshm_delta_discrete is the largest of Thm 8.5's terms; where ``binding`` is named, that kind
    of term is strictly the largest (so dropping or changing it changes δ)."""
    from privstream.mechanisms.gshm import gshm_delta_discrete

    terms = _theorem_8_5_terms(epsilon, sigma2, tau, ell)
    largest = max(terms.values())
    if binding is not None:
        kind = {key: key if isinstance(key, str) else key[0] for key in terms}
        mine = max(v for key, v in terms.items() if kind[key] == binding)
        others = max(v for key, v in terms.items() if kind[key] != binding)
        assert mine == largest and mine > others * 1.001
    assert gshm_delta_discrete(epsilon, sigma2, tau, ell) == pytest.approx(largest, rel=1e-9, abs=0)


# ---- zcdp_profile: the CKS 2020 bound minimised over α, against a plain-Python minimisation ------


def _zcdp_reference(rho: float, e: float) -> float:
    """min over α > 1 of exp((α−1)(αρ − e))/(α − 1)·(1 − 1/α)^α, capped at 1, by golden-section
    search on t = ln(α − 1) (the log of the bound is convex in α, hence unimodal in t); for e < 0,
    min(1, 1 − e^e + δ(0)). Plain floats; shares nothing with the module's bisection."""
    if e < 0:
        return min(1.0, 1.0 - math.exp(e) + _zcdp_reference(rho, 0.0))

    def log_bound(t: float) -> float:
        alpha = 1.0 + math.exp(t)
        return (alpha - 1) * (alpha * rho - e) + alpha * math.log(1 - 1 / alpha) - t

    inv_phi = (math.sqrt(5) - 1) / 2
    a, b = -40.0, 80.0
    c, d = b - inv_phi * (b - a), a + inv_phi * (b - a)
    fc, fd = log_bound(c), log_bound(d)
    for _ in range(200):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - inv_phi * (b - a)
            fc = log_bound(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv_phi * (b - a)
            fd = log_bound(d)
    return min(1.0, math.exp(log_bound((a + b) / 2)))


# (ρ, e) with the best α well above 1.01 (where the module's bisection starts): large and small e
# for one ρ, tiny ρ (best α ≈ 270), e = 0, and e < 0 (δ(e) = 1 − e^e + δ(0), capped at 1 for the
# last two).
ZCDP_POINTS = [
    (0.5, 8.0),
    (0.1, 3.0),
    (0.02, 1.0),
    (1e-4, 0.05),
    (0.005, 0.0),
    (2.0, 0.5),
    (0.3, 0.0),
    (0.1, -0.5),
    (2.0, -1.0),
    (0.3, -3.0),
]


@pytest.mark.parametrize(("rho", "e"), ZCDP_POINTS)
def test_zcdp_profile_is_the_minimum_over_alpha(rho: float, e: float) -> None:
    assert float(zcdp_profile(rho, e)) == pytest.approx(_zcdp_reference(rho, e), rel=1e-9, abs=0)


def test_zcdp_profile_is_elementwise_and_takes_exact_rationals() -> None:
    """Arrays broadcast elementwise, and ρ_j = j/(2σ²) may be exact Fractions (GSHMParameters holds
    σ² as one): the same values as the float reference."""
    rhos, es = zip(*ZCDP_POINTS, strict=True)
    expected = [_zcdp_reference(r, e) for r, e in ZCDP_POINTS]
    assert zcdp_profile(np.array(rhos), np.array(es)) == pytest.approx(expected, rel=1e-9, abs=0)
    exact = zcdp_profile([Fraction(1, 10), Fraction(3, 10)], [Fraction(1, 2), Fraction(-1, 4)])
    assert exact == pytest.approx([_zcdp_reference(0.1, 0.5), _zcdp_reference(0.3, -0.25)], rel=1e-9, abs=0)


def test_zcdp_profile_saturates_at_one_silently() -> None:
    """For a huge ρ (σ = 0.05 and l = 1000 give ρ = 2·10⁵; the calibration tries such σ) the bound
    is a probability: exactly 1, with no overflow or other warning on the way."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert zcdp_profile(2e5, 0.5) == 1.0
        assert zcdp_profile(np.array([1e6, 2e5]), np.array([0.0, 3.0])).tolist() == [1.0, 1.0]


# ---- _condition with a profile where the middle term of Thm 8.5 decides ----------------------------


def test_the_condition_takes_the_largest_of_all_three_term_families() -> None:
    """_condition is Thm 8.5's right-hand side for whatever profile it is given. With the module's
    two profiles the j = l term (shared by both per-j families, γ_l = 0) or 1 − p^l decides; this
    made-up profile (decreasing in e, increasing in j) makes 1 − p^{l−j} + p^{l−j}·δ_j(ε − γ_j) at
    j = 1 the strict maximum, so that term's sign, argument and presence all matter."""

    def profile(j: np.ndarray, e: np.ndarray) -> np.ndarray:
        return np.clip(0.3 + 0.02 * j - 0.05 * e, 0.0, 1.0)

    def delta(j: int, e: float) -> float:
        return min(1.0, max(0.0, 0.3 + 0.02 * j - 0.05 * e))

    epsilon, ell, p = 0.5, 4, 0.9
    kept = [
        1 - p ** (ell - j) + p ** (ell - j) * delta(j, epsilon - (ell - j) * math.log(p)) for j in range(1, 5)
    ]
    shifted = [delta(j, epsilon + (ell - j) * math.log(p)) for j in range(1, 5)]
    none_kept = 1 - p**ell
    assert kept[0] > max(none_kept, *kept[1:], *shifted) + 0.03
    assert _condition(epsilon, ell, math.log(p), profile) == pytest.approx(kept[0], rel=1e-12)


# ---- the calibration's shortcuts (issue 25): each decides exactly what the full computation does --


def _zcdp_hundred_steps(rho: np.ndarray, e: np.ndarray) -> np.ndarray:
    """zcdp_profile as first written: always 100 bisection steps (no fixed-point stop)."""
    rho, e = np.broadcast_arrays(np.asarray(rho, dtype=float), np.asarray(e, dtype=float))
    e0 = np.maximum(e, 0.0)
    lo, hi = np.full(rho.shape, 1.01), (e0 + 1) / (2 * rho) + 2
    for _ in range(100):
        mid = (lo + hi) / 2
        neg = (2 * mid - 1) * rho - e0 + np.log1p(-1.0 / mid) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
    alpha = (lo + hi) / 2
    with np.errstate(over="ignore"):
        bound = np.exp((alpha - 1) * (alpha * rho - e0) + alpha * np.log1p(-1.0 / alpha)) / (alpha - 1)
    bound = np.minimum(bound, 1.0)
    return np.where(e >= 0, bound, np.minimum(1.0, 1.0 - np.exp(e) + bound))


def test_zcdp_profile_stops_at_a_fixed_point_with_the_same_bits() -> None:
    """The bisection stops once a step changes neither end; the values are bit for bit those of the
    full 100 steps, over ρ from 10⁻⁸ (α's bracket near 10⁸) to 10³ and e of both signs."""
    rho = np.repeat(np.logspace(-8, 3, 45), 5)
    e = np.tile(np.array([-2.0, 0.0, 0.3, 2.0, 9.0]), 45)
    assert np.array_equal(zcdp_profile(rho, e), _zcdp_hundred_steps(rho, e))


@pytest.mark.parametrize(
    ("epsilon", "sigma2", "tau", "ell"),
    [
        (1.0, 50.0, 10, 4),  # 1 − p^l decides
        (1.0, 50.0, 40, 4),  # j = l decides
        (0.05, 1.0, 1, 2),  # δ_j(ε + γ_j) at j < l decides
        (0.5, 200.0, 60, 16),
        (1.0, 3.0, 9, 64),
    ],
)
def test_the_condition_with_a_bar_decides_exactly_what_the_full_value_does(
    epsilon: float, sigma2: float, tau: int, ell: int
) -> None:
    """``gshm_delta_discrete(..., above=x)`` is the full δ when that is <= x, and a value > x when
    the full δ exceeds x: for bars just below, at and just above the full value and at each term."""
    from privstream.mechanisms.gshm import gshm_delta_discrete

    full = gshm_delta_discrete(epsilon, sigma2, tau, ell)
    terms = _theorem_8_5_terms(epsilon, sigma2, tau, ell).values()
    for bar in (full, full * (1 + 1e-9), full * (1 - 1e-9), 0.0, 1.0, *terms):
        got = gshm_delta_discrete(epsilon, sigma2, tau, ell, above=bar)
        if full <= bar:
            assert got == full
        else:
            assert got > bar


@pytest.mark.parametrize(("sigma2", "ell"), [(0.0025, 4), (2.0, 4), (30.0, 64), (400.0, 16), (4000.0, 256)])
@pytest.mark.parametrize("delta", [1e-9, 1e-3])
def test_feasibility_is_the_condition_at_the_top_of_the_tau_range(
    sigma2: float, ell: int, delta: float
) -> None:
    """``gshm_feasible`` is "δ at τ = ⌊45σ⌋ + 10 is within δ", and ``smallest_tau_discrete`` is None
    exactly when it is false; otherwise the first τ in [0, top] meeting the full condition."""
    from privstream.mechanisms.gshm import gshm_delta_discrete, gshm_feasible, smallest_tau_discrete

    top = int(45 * math.sqrt(sigma2)) + 10
    feasible = gshm_delta_discrete(1.0, sigma2, top, ell) <= delta
    assert gshm_feasible(1.0, delta, ell, sigma2) is feasible
    expected = _first(lambda t: gshm_delta_discrete(1.0, sigma2, t, ell) <= delta, top) if feasible else None
    assert smallest_tau_discrete(1.0, delta, ell, sigma2) == expected


def test_the_tau_search_moves_up_when_the_gaussian_part_binds() -> None:
    """Where 1 − p^l alone is met at a τ whose δ_j terms are still above δ, the answer lies above
    that τ: the search must move up from there, to the first τ of the full condition."""
    from privstream.mechanisms.gshm import _log_p, gshm_delta_discrete, smallest_tau_discrete

    epsilon, delta, ell, sigma2 = 0.05, 0.3, 4, 14.5  # found by a scan: rare at the usual ε, δ
    top = int(45 * math.sqrt(sigma2)) + 10
    first_term1 = _first(lambda t: -math.expm1(ell * _log_p(t, sigma2)) <= delta, top)
    expected = _first(lambda t: gshm_delta_discrete(epsilon, sigma2, t, ell) <= delta, top)
    assert first_term1 is not None and expected is not None and expected > first_term1
    assert smallest_tau_discrete(epsilon, delta, ell, sigma2) == expected


def test_a_bar_met_exactly_by_one_term_family_still_sees_the_larger_one() -> None:
    """The early exit returns a term only when it is strictly above the bar: with the bar equal to
    the largest δ_j(ε + γ_j) (the made-up profile of the term-family test, where the middle family
    is larger and 1 − p^l is below the bar) the full value, the middle family's, is returned."""

    def profile(j: np.ndarray, e: np.ndarray) -> np.ndarray:
        return np.clip(0.3 + 0.02 * j - 0.05 * e, 0.0, 1.0)

    epsilon, ell, log_p = 0.5, 4, math.log(0.9)
    j = np.arange(1, ell + 1, dtype=float)
    shifted = float(profile(j, epsilon + (ell - j) * log_p).max())
    full = _condition(epsilon, ell, log_p, profile)
    assert -math.expm1(ell * log_p) < shifted < full
    assert _condition(epsilon, ell, log_p, profile, above=shifted) == full


def test_a_delta_met_with_equality_counts_as_met() -> None:
    """The condition is δ_GSHM <= δ: a δ equal to the computed value is met, by the feasibility
    test at the top of the τ range, by the threshold term that starts the τ search, and by the
    search itself (ε = 1, l = 4, σ² = 400: at τ = 40 the threshold term decides)."""
    from privstream.mechanisms.gshm import _log_p, gshm_delta_discrete, gshm_feasible, smallest_tau_discrete

    epsilon, ell, sigma2 = 1.0, 4, 400.0
    top = int(45 * math.sqrt(sigma2)) + 10
    at_top = gshm_delta_discrete(epsilon, sigma2, top, ell)
    assert gshm_feasible(epsilon, at_top, ell, sigma2)
    tau = 40
    delta = gshm_delta_discrete(epsilon, sigma2, tau, ell)
    assert delta == -math.expm1(ell * _log_p(tau, sigma2))  # the threshold term decides here
    assert gshm_delta_discrete(epsilon, sigma2, tau - 1, ell) > delta
    assert smallest_tau_discrete(epsilon, delta, ell, sigma2) == tau
    inner = gshm_delta_discrete(1.0, 50.0, 40, 4)  # here the Gaussian part (j = l) decides
    assert inner > -math.expm1(4 * _log_p(40, 50.0))
    assert smallest_tau_discrete(1.0, inner, 4, 50.0) <= 40


# ---- calibrate_gshm's search, re-run from its description with this file's own τ + b -------------


def _described_search(epsilon: float, delta: float, ell: int) -> tuple[Fraction, int]:
    """calibrate_gshm's search as its comments describe it, evaluating σ by ``_objective`` (own τ and
    b scans): σ² = ⌈100σ²⌉/100; the smallest feasible σ bracketed from [0.05, max(1, √l/ε)] (upper
    end doubled until feasible) and narrowed by geometric bisection until hi/lo < 1.002; from the
    upper end, σ scanned up by ×1.1, then by ×1.02, while τ + b does not get worse."""
    memo: dict[Fraction, int | None] = {}

    def objective(sigma: float) -> int | None:
        s2 = Fraction(math.ceil(sigma * sigma * 100), 100)
        if s2 not in memo:
            memo[s2] = _objective(epsilon, delta, ell, s2)
        return memo[s2]

    lo, hi = 0.05, max(1.0, math.sqrt(ell) / epsilon)
    while objective(hi) is None:
        lo, hi = hi, 2 * hi
    while hi / lo >= 1.002:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if objective(mid) is None else (lo, mid)
    sigma, best = hi, objective(hi)
    assert best is not None
    for factor in (1.1, 1.02):
        while (cand := objective(sigma * factor)) is not None and cand <= best:
            sigma, best = sigma * factor, cand
    return Fraction(math.ceil(sigma * sigma * 100), 100), best


@pytest.mark.parametrize(
    ("epsilon", "delta", "ell"),
    [
        # both scans move σ, and a plateau of equal τ + b makes the answer depend on the search path
        (3.0, 0.01, 32),
        # ε chosen (to the last bit) so that the bisection's hi/lo is exactly 1.002 after its 11th
        # step: the search takes one more step (it stops only below 1.002), which moves hi, and the
        # scans from there end at σ² = 7.34 (7.36 from the unmoved hi)
        (0.3341460254511068, 0.1, 1),
    ],
)
def test_the_calibration_is_the_described_search(epsilon: float, delta: float, ell: int) -> None:
    s2, objective = _described_search(epsilon, delta, ell)
    p = calibrate_gshm(epsilon, delta, ell)
    assert (p.sigma2, p.objective) == (s2, objective)


# ---- check_epsilon / check_delta ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [True, False, "1", "0.5", Decimal("0.5"), None, 0, 0.0, -1.0, float("inf"), float("nan")]
)
def test_check_epsilon_refuses_non_numbers_bools_and_non_positive_or_infinite(value: object) -> None:
    with pytest.raises(ValueError, match="^epsilon must be a positive finite number"):
        check_epsilon(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value", [True, False, "0.5", Decimal("0.5"), None, 0, 0.0, 1, 1.0, 2.5, float("inf"), float("nan")]
)
def test_check_delta_refuses_non_numbers_bools_and_values_outside_0_1(value: object) -> None:
    with pytest.raises(ValueError, match=r"^delta must lie in \(0, 1\)"):
        check_delta(value)  # type: ignore[arg-type]


def test_check_epsilon_and_delta_return_floats_of_accepted_values() -> None:
    for value, expected in [(1, 1.0), (1.0, 1.0), (Fraction(1, 2), 0.5), (1e300, 1e300), (5e-324, 5e-324)]:
        result = check_epsilon(value)
        assert type(result) is float and result == expected
    for value, expected in [(0.5, 0.5), (Fraction(1, 3), 1 / 3), (1e-300, 1e-300), (1 - 2**-53, 1 - 2**-53)]:
        result = check_delta(value)
        assert type(result) is float and result == expected
