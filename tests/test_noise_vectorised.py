"""The vectorised exact samplers (privstream.noise.vectorised; CKS 2020 Algs. 1–3) against exact pmfs,
against the scalar kernels, and at the variances DPSW-Sketch uses.

False-failure rates: every goodness-of-fit / homogeneity test rejects at α = 1e-6 and every moment
check allows 6 standard errors (two-sided normal tail ≈ 2e-9), so a correct sampler fails a check
with probability <= 1e-6 for a fresh seed; the seeds here are fixed, so the suite is deterministic.
The exact pmfs are computed with 60-digit decimals over ±(40σ + 20), beyond which the mass is
< 1e-300, far below anything these sample sizes can see.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privstream.eval.studies.dpsw import default_params
from privstream.noise import SeededRandomSource, discrete_gaussian_array, discrete_laplace_array
from privstream.noise import discrete as discrete_module
from privstream.noise.discrete import SMALL_ARRAY, _gaussian_array, _laplace_array
from privstream.noise.rng import KeyedRandomSource
from privstream.noise.vectorised import DEFAULT_LIMITS, Limits, gaussian_array, laplace_array, uniform_below
from privstream.window.pcms import pcms_variance
from tests.chi_square import pool_cells

ALPHA = 1e-6
N_DRAWS = 200_000


def _dec(frac: Fraction) -> Decimal:
    return Decimal(frac.numerator) / Decimal(frac.denominator)


def gaussian_pmf(sigma2: Fraction) -> tuple[int, np.ndarray]:
    """(R, exact pmf ∝ exp(-y²/(2σ²)) on [-R, R]) in 60-digit decimals, rounded to float at the end."""
    radius = int(40 * math.sqrt(sigma2)) + 20
    with localcontext() as ctx:
        ctx.prec = 60
        two_s2 = 2 * _dec(sigma2)
        weights = [(-Decimal(y * y) / two_s2).exp() for y in range(-radius, radius + 1)]
        total = sum(weights)
        return radius, np.array([float(w / total) for w in weights])


def laplace_pmf(scale: Fraction) -> tuple[int, np.ndarray]:
    """(R, exact pmf ∝ exp(-|z|/scale) on [-R, R]), normalised over the support."""
    radius = int(80 * scale) + 40
    with localcontext() as ctx:
        ctx.prec = 60
        inv = 1 / _dec(scale)
        weights = [(-Decimal(abs(z)) * inv).exp() for z in range(-radius, radius + 1)]
        total = sum(weights)
        return radius, np.array([float(w / total) for w in weights])


def pooled_counts(samples: np.ndarray, radius: int, pmf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Observed and expected counts on [-R, R], cells with expected count < 5 pooled (tails in order)."""
    assert samples.size and int(np.abs(samples).max()) <= radius
    observed = np.bincount(samples + radius, minlength=pmf.size).astype(float)
    return pool_cells(observed, samples.size * pmf)


def gof_p(samples: np.ndarray, radius: int, pmf: np.ndarray) -> float:
    observed, expected = pooled_counts(samples, radius, pmf)
    return float(stats.chisquare(observed, expected).pvalue)


def same_distribution_p(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square test of homogeneity; values pooled into cells of >= 10 joint counts."""
    lo = int(min(a.min(), b.min()))
    ca = np.bincount(a - lo)
    cb = np.bincount(b - lo, minlength=ca.size)
    ca = np.pad(ca, (0, cb.size - ca.size))
    rows, acc = [], np.zeros(2)
    for pair in zip(ca, cb, strict=True):
        acc += pair
        if acc.sum() >= 10:
            rows.append(acc)
            acc = np.zeros(2)
    rows[-1] = rows[-1] + acc
    return float(stats.chi2_contingency(np.array(rows)).pvalue)


def dpsw_variances() -> list[Fraction]:
    """σ² = a/ρ_j of the PCMSs of benchmarks/bench_dpsw.py's default setting (a = 3)."""
    p = default_params()
    return [pcms_variance(p.depth, rho) for rho in p.budgets]


@pytest.mark.parametrize(
    ("sigma2", "seed"),
    [
        (Fraction(1, 2), 101),
        (Fraction(1), 102),
        (Fraction(7, 3), 103),
        (Fraction(10), 104),
        (Fraction(1, 5), 105),
    ],
)
def test_gaussian_matches_exact_pmf(sigma2: Fraction, seed: int) -> None:
    samples = discrete_gaussian_array(sigma2, N_DRAWS, SeededRandomSource(seed))
    assert samples.dtype == np.int64 and samples.shape == (N_DRAWS,)
    assert gof_p(samples, *gaussian_pmf(sigma2)) > ALPHA


@pytest.mark.parametrize(
    ("scale", "seed"), [(Fraction(1, 2), 111), (Fraction(1), 112), (Fraction(7, 3), 113), (Fraction(10), 114)]
)
def test_laplace_matches_exact_pmf(scale: Fraction, seed: int) -> None:
    samples = discrete_laplace_array(scale, N_DRAWS, SeededRandomSource(seed))
    assert samples.dtype == np.int64
    assert gof_p(samples, *laplace_pmf(scale)) > ALPHA


def test_gof_detects_a_small_variance_error() -> None:
    """Power: σ² = 7/3 samples against the σ² = 2.2 pmf (a 6 % error) are rejected."""
    samples = discrete_gaussian_array(Fraction(7, 3), N_DRAWS, SeededRandomSource(106))
    assert gof_p(samples, *gaussian_pmf(Fraction(11, 5))) < ALPHA


def test_large_rational_sigma2_takes_the_fast_path_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """σ² = 7/3 + 10^-45 and 7/3 + 2^-150 (numerators and denominators far beyond int64):
    vectorised (no scalar fallback) and exact (the pmfs differ from 7/3's by < 1e-44)."""
    calls = Counter[str]()
    monkeypatch.setattr(discrete_module, "_scalar_array", lambda *a: calls.update(["scalar"]))
    big = Fraction(7 * 10**45 + 3, 3 * 10**45)
    assert big.denominator > 2**140
    odd = Fraction(7, 3) + Fraction(1, 2**150)
    assert odd.denominator > 2**140
    for sigma2, seed in ((big, 121), (odd, 122)):
        samples = discrete_gaussian_array(sigma2, N_DRAWS, SeededRandomSource(seed))
        assert gof_p(samples, *gaussian_pmf(Fraction(7, 3))) > ALPHA
    assert not calls


# Limits that hand many lanes to the exact scalar code: ties of a 2-bit comparison (1 in 4), uniform
# bounds above 8 by randbelow, ⌊γ⌋ > 1 and |Y| >= 4 by the scalar Alg. 1 kernel.
TINY = Limits(word_bound=8, compare_bits=2, whole_trials=1, table_size=4)


@pytest.mark.parametrize(("sigma2", "seed"), [(Fraction(7, 3), 131), (Fraction(10), 132)])
def test_gaussian_hand_overs_are_exact(sigma2: Fraction, seed: int) -> None:
    used: Counter[str] = Counter()
    n = 100_000
    samples = gaussian_array(sigma2.numerator, sigma2.denominator, n, SeededRandomSource(seed), TINY, used)
    assert (
        used["compare_ties"] > 1000 and used["scalar_accept_lanes"] > 1000 and used["randbelow_lanes"] > 100
    )
    assert gof_p(samples, *gaussian_pmf(sigma2)) > ALPHA


def test_laplace_hand_overs_are_exact() -> None:
    used: Counter[str] = Counter()
    samples = laplace_array(10, 3, N_DRAWS, SeededRandomSource(133), Limits(word_bound=16), used)
    assert used["randbelow_lanes"] > 1000
    assert gof_p(samples, *laplace_pmf(Fraction(10, 3))) > ALPHA


@pytest.fixture
def scalar_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the whole-array scalar fallbacks (``discrete._scalar_array`` calls) of a test."""
    calls = Counter[str]()
    scalar = discrete_module._scalar_array

    def counting(*args: object) -> np.ndarray:
        calls.update(["scalar"])
        return scalar(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(discrete_module, "_scalar_array", counting)
    return calls


def test_scalar_fallback_agrees_with_vectorised(scalar_calls: Counter[str]) -> None:
    """max_t = 0 forces the whole-array scalar path (counted); it and the vectorised path agree in
    distribution (homogeneity) and each fits the exact pmf."""
    sigma2, n = Fraction(7, 3), 20_000
    slow = _gaussian_array(sigma2, n, SeededRandomSource(141), Limits(max_t=0))
    assert scalar_calls["scalar"] == 1
    fast = _gaussian_array(sigma2, N_DRAWS, SeededRandomSource(142))
    assert scalar_calls["scalar"] == 1
    assert same_distribution_p(slow, fast) > ALPHA
    assert gof_p(slow, *gaussian_pmf(sigma2)) > ALPHA
    lap_slow = _laplace_array(Fraction(7, 3), n, SeededRandomSource(143), Limits(max_t=0))
    assert scalar_calls["scalar"] == 2
    lap_fast = _laplace_array(Fraction(7, 3), N_DRAWS, SeededRandomSource(144))
    assert same_distribution_p(lap_slow, lap_fast) > ALPHA


def test_scale_beyond_int64_products_falls_back(scalar_calls: Counter[str]) -> None:
    """t = ⌊σ⌋ + 1 > max_t = 2^24 (σ² = 2^50) and a float Laplace scale (t ≈ 2^52) use the scalar
    kernels; the draws still have the right spread."""
    samples = discrete_gaussian_array(Fraction(2**50), 2000, SeededRandomSource(151)).astype(float)
    assert scalar_calls["scalar"] == 1
    sd = 2.0**25
    assert abs(samples.mean()) < 6 * sd / math.sqrt(samples.size)
    assert abs(samples.var() / sd**2 - 1) < 6 * math.sqrt(2 / samples.size)
    discrete_laplace_array(1 / 0.7, SMALL_ARRAY, SeededRandomSource(152))
    assert scalar_calls["scalar"] == 2


@pytest.mark.parametrize("index", [0, 1, 2])
def test_dpsw_variances_mean_and_variance(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """At DPSW's σ² = a/ρ_j (~70-bit numerators): vectorised, mean ≈ 0 and variance ≈ σ² within 6
    standard errors (the discrete Gaussian's variance is σ² up to < e^-(2π²σ²) for these σ)."""
    calls = Counter[str]()
    monkeypatch.setattr(discrete_module, "_scalar_array", lambda *a: calls.update(["scalar"]))
    sigma2 = dpsw_variances()[index]
    assert sigma2.numerator > 2**63 or sigma2.denominator > 2**63  # beyond int64: the case to cover
    samples = discrete_gaussian_array(sigma2, N_DRAWS, SeededRandomSource(160 + index)).astype(float)
    assert not calls
    s2 = float(sigma2)
    assert abs(samples.mean()) < 6 * math.sqrt(s2 / N_DRAWS)
    assert abs(samples.var() - s2) < 6 * s2 * math.sqrt(2 / N_DRAWS)


def test_dpsw_variance_matches_exact_pmf() -> None:
    sigma2 = dpsw_variances()[0]
    samples = discrete_gaussian_array(sigma2, N_DRAWS, SeededRandomSource(165))
    assert gof_p(samples, *gaussian_pmf(sigma2)) > ALPHA


@pytest.mark.parametrize(
    "sample",
    [
        lambda rng: discrete_gaussian_array(Fraction(7, 3), 5000, rng),
        lambda rng: discrete_gaussian_array(dpsw_variances()[1], 5000, rng),
        lambda rng: discrete_laplace_array(Fraction(5, 2), 5000, rng),
    ],
)
def test_determinism(sample: Callable[[object], np.ndarray]) -> None:
    a = sample(SeededRandomSource(7))
    assert np.array_equal(a, sample(SeededRandomSource(7)))
    assert not np.array_equal(a, sample(SeededRandomSource(8)))
    key = b"k" * 32
    b = sample(KeyedRandomSource(key, "ctx"))
    assert np.array_equal(b, sample(KeyedRandomSource(key, "ctx")))
    assert not np.array_equal(b, sample(KeyedRandomSource(key, "other")))


def test_empty_and_bad_arguments() -> None:
    for fn, name in ((discrete_gaussian_array, "sigma2"), (discrete_laplace_array, "scale")):
        out = fn(Fraction(3), 0, SeededRandomSource(1))
        assert out.shape == (0,) and out.dtype == np.int64
        for bad in (0, -1, Fraction(-1, 3), float("nan"), float("inf")):
            with pytest.raises(ValueError, match=name):
                fn(bad, 10)
        with pytest.raises(ValueError, match="n"):
            fn(Fraction(3), -1)
    with pytest.raises(ValueError, match="word_bound"):
        Limits(word_bound=2**63 + 1)


def test_geometric_runs_match_exact_pmf() -> None:
    """V (Alg. 2's count of Bernoulli(exp(-1)) successes before the first failure), cut from one
    flat pool of trials: Pr[V = v] = e^-v (1 - e^-1)."""
    from privstream.noise.vectorised import DEFAULT_LIMITS, _Draws

    draws = _Draws(SeededRandomSource(171), DEFAULT_LIMITS, None)
    v = np.concatenate([draws.geometric(size) for size in (1, 7, 1000, N_DRAWS)])
    radius = 60
    pmf = np.zeros(2 * radius + 1)
    pmf[radius:] = [math.exp(-k) * (1 - math.exp(-1)) for k in range(radius + 1)]
    assert gof_p(v, radius, pmf / pmf.sum()) > ALPHA


def test_pinned_streams() -> None:
    """Pins the seeded byte stream and the keyed bit → sample mapping. The keyed DRBG replays a
    sketch's noise after a restore (privstream.window: noise context "v3"), so a change of either
    must fail here and come with a new noise-context version."""
    source = SeededRandomSource(2026)
    assert (source.randbits(64), source.randbelow(1000), source._take(5).hex()) == (
        7433812993116374050,
        715,
        "2c8e39d365",
    )

    def keyed() -> KeyedRandomSource:
        return KeyedRandomSource(b"k" * 32, "pin")

    # fewer than SMALL_ARRAY draws: the scalar kernels; 40 draws: the vectorised path
    assert discrete_gaussian_array(Fraction(3713, 10), 8, keyed()).tolist() == [
        -9,
        -14,
        22,
        13,
        6,
        -3,
        14,
        22,
    ]
    assert discrete_gaussian_array(Fraction(3713, 10), 40, keyed()).tolist()[:8] == [
        -15,
        -10,
        -16,
        10,
        13,
        -12,
        7,
        -28,
    ]
    assert discrete_laplace_array(Fraction(7, 3), 8, SeededRandomSource(7)).tolist() == [
        0,
        -3,
        -2,
        1,
        -1,
        1,
        -5,
        -3,
    ]
    assert discrete_laplace_array(Fraction(7, 3), 40, SeededRandomSource(7)).tolist()[:8] == [
        -1,
        0,
        0,
        -5,
        0,
        -1,
        4,
        5,
    ]


# --- uniform_below: exact bulk uniforms below any bound up to 2**63 (the LDP randomisers' GRR draws) ---

UNIFORM_BOUNDS = (1, 2, 3, 7, 64, 65, 2**26 + 1, 2**32, 2**32 + 1, 3 * 2**40, 3 * 2**61, 2**63 - 1, 2**63)


class BudgetedSource(SeededRandomSource):
    """A seeded source that fails once more than ``budget`` bits are asked of it. uniform_below redraws
    fewer than half of its words (a quarter at most for the bounds here) and refills in chunks of at
    least 4 KiB and a quarter of what it drew, so 256 bits per value plus 2**18 is ample; a sampler
    that kept rejecting would fail here at once instead of drawing without end."""

    def __init__(self, seed: str, count: int) -> None:
        super().__init__(seed)
        self.budget = 256 * count + 2**18

    def randbits(self, n: int) -> int:
        self.budget -= n
        assert self.budget >= 0, "uniform_below drew far more bits than its rejection rate allows"
        return super().randbits(n)


@pytest.mark.parametrize("bound", UNIFORM_BOUNDS, ids=lambda b: f"{b:#x}")
def test_uniform_below_stays_below_its_bound_and_reaches_every_part_of_it(bound: int) -> None:
    """4000 draws: int64, all in [0, bound); every value of a bound <= 65 is drawn, and for larger bounds
    every eighth of [0, bound) and every residue mod 8 is hit (so the top and bottom bits are live
    up to 2**63 - 1). A correct sampler misses one of <= 65 equally likely cells in 4000 draws with
    probability <= 65·(64/65)^4000 < 1e-25; the seeds are fixed, so the outcome is too."""
    out = uniform_below(bound, 4000, BudgetedSource(f"below-{bound}", 4000))
    assert out.dtype == np.int64 and out.shape == (4000,)
    assert int(out.min()) >= 0 and int(out.max()) < bound
    values = [int(u) for u in out.tolist()]
    if bound <= 65:
        assert set(values) == set(range(bound))
    else:
        assert {u * 8 // bound for u in values} == set(range(8))
        assert {u % 8 for u in values} == set(range(8))


@pytest.mark.parametrize(
    ("bound", "cells"), [(3, 3), (2**26 + 1, 6), (3 * 2**40, 6), (3 * 2**61, 6), (2**63, 8)]
)
def test_uniform_below_is_uniform(bound: int, cells: int) -> None:
    """Chi-square of 60k draws over ``cells`` equally likely cells, by the top (⌊u·cells/bound⌋) and by
    the bottom (u mod cells) of u, at α = 1e-6 each (10 tests: false-failure rate <= 1e-5 for a fresh
    seed; seeded, so fixed). The cells are equally likely to within cells/bound. The rejection is
    exercised: 3·2**61 redraws a quarter of its 64-bit words, 3 the 8-bit word 255; 2**63 none."""
    out = uniform_below(bound, 60_000, BudgetedSource(f"uniform-{bound}", 60_000))
    top = np.array([int(u) * cells // bound for u in out.tolist()])
    for column in (top, out % cells):
        observed = np.bincount(column, minlength=cells)
        assert observed.size == cells
        assert float(stats.chisquare(observed).pvalue) > ALPHA


def test_uniform_below_edge_cases_and_bad_bounds() -> None:
    """Bound 1 needs no randomness (all zeros, nothing drawn); count 0 gives an empty int64 array;
    a bound outside [1, 2**63] is refused (larger ones are drawn with randbelow by the callers); the
    limits argument decides where bulk words stop (with DEFAULT_LIMITS a bound above 2**32 is drawn
    with one randbelow per lane: the same values as those calls); a seeded source gives the same array."""

    class NoDraws:
        def randbits(self, n: int) -> int:
            raise AssertionError("drew bits")

        def randbelow(self, n: int) -> int:
            raise AssertionError("drew below")

    ones = uniform_below(1, 5, NoDraws())  # type: ignore[arg-type]
    assert ones.dtype == np.int64 and ones.tolist() == [0] * 5
    for bound in (1, 2**63):
        empty = uniform_below(bound, 0, SeededRandomSource(1))
        assert empty.dtype == np.int64 and empty.shape == (0,)
    for bad in (0, -1, 2**63 + 1, 2**64):
        with pytest.raises(ValueError, match="bound"):
            uniform_below(bad, 3, SeededRandomSource(1))
    a = uniform_below(3 * 2**40, 50, BudgetedSource("9", 50))
    assert a.tolist() == uniform_below(3 * 2**40, 50, BudgetedSource("9", 50)).tolist()
    assert a.tolist() != uniform_below(3 * 2**40, 50, BudgetedSource("10", 50)).tolist()
    scalar = SeededRandomSource(9)
    narrow = uniform_below(3 * 2**40, 50, SeededRandomSource(9), DEFAULT_LIMITS)
    assert narrow.dtype == np.int64 and narrow.tolist() == [scalar.randbelow(3 * 2**40) for _ in range(50)]
