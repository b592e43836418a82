"""The noise scale and the threshold that ``release(...)`` *actually uses*, recorded where the noise
is drawn and checked against the papers' formulas computed independently here.

Why: a test that compares a mechanism with its own calibration function (``calibrate_gshm``,
``pmg_threshold`` …) passes when the release samples with a σ 10 % too small or keeps keys one
below the calibrated threshold. So every test here

* records, at the sampler boundary, every draw the release makes: the exact discrete Laplace scale
  t/s and the discrete Gaussian σ² = num/den passed to the exact kernels (Canonne–Kamath–Steinke
  2020, Alg. 2 and 3), from every privstream module outside ``privstream.noise`` that calls them
  (:class:`NoiseRecorder`; the domain-wide top-k's order-statistics sampler is recorded too);
* measures the threshold the release applies *behaviourally*: with the recorded draws scripted to
  0, a key of count c is released iff c >= T_eff, and T_eff is found by bisection on c;
* compares both with the formulas written out below from the papers:

  - PMG, Lebeda–Tětek Alg. 2 with geometric noise (§5.2): scale 1/ε (one shared + one per slot),
    T = 1 + 2⌈ln(6e^ε/((e^ε+1)δ))/ε⌉; on a standard MG sketch (§5.1): k + 1 tail samples,
    T = 1 + 2·min{m : (k+1)·Pr[Z >= m] <= δ};
  - GSHM, Lebeda–Tětek Thm 8.5 (after Wilkins–Kifer–Zhang–Karrer): the σ² and τ used must satisfy
    the Thm 8.5 condition evaluated here *exactly* for the discrete Gaussian that is sampled (its
    tail by summing the pmf, its privacy profile δ_j(e) = E[(1 − e^{e−L})_+] from the exact
    distribution of the privacy loss L by convolution), and the condition must FAIL for 0.9·σ and
    for τ − 1 — so a release that samples with σ·0.9 or keeps keys at τ (threshold one lower)
    fails here;
  - thresholded Laplace(k/ε) (Lebeda–Tětek §7; the project's derivation in
    ``privstream.mechanisms.laplace_threshold``): scale k/ε, T = min{T >= 2 : Pr[Z >= T−1]·C <= δ}
    with C = max(k, max_{1<=n<=k} n·e^{ε(1−n/k)}) computed here by brute force over every n;
  - exact_threshold (stability-based histogram): scale 1/ε, T = min{T >= 2 : Pr[Z >= T−1] <= δ};
  - the pure ε-DP domain-wide releases: Lebeda–Tětek §6 (Alg. 3, then Laplace(2/ε) on the 1/(k+1)
    lattice: scale 2(k+1)/ε lattice units), Chan et al. (Laplace(k/ε), top k) and Chan et al.
    Alg. 1 (Geom(exp(ε/(k+1))), clamp at 0: scale (k+1)/ε, threshold 1).

Noise comes only from the project's exact kernels driven by :class:`SeededRandomSource`; nothing
here draws noise from ``random`` or ``numpy.random``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import logsumexp

from privstream.accounting import Budget
from privstream.mechanisms import release
from privstream.mechanisms.order_statistics import TopNoiseLevels
from privstream.mechanisms.registry import names
from privstream.noise import SeededRandomSource
from privstream.noise import discrete as kernels
from privstream.sketches import ExactHistogram, MisraGries, StandardMisraGries

EPS, DELTA = 0.7, 1e-6  #: ε = 0.7 is not a dyadic rational: the exact scale must be Δ·10/7
EPS_EXACT = Fraction(7, 10)  #: the rational the ledger charges for ε = 0.7 (its decimal)

_LAPLACE, _GAUSSIAN = kernels._discrete_laplace, kernels._discrete_gaussian


# ---------------------------------------------------------------------------------------------------
# Recording at the sampler boundary
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Draw:
    """One noise draw: ``kind`` "laplace" (scale t/s) or "gaussian" (σ² = num/den), its value."""

    kind: str
    scale: Fraction
    value: int


@dataclass
class NoiseRecorder:
    """Every draw a release makes through the exact kernels (and every order-statistics sampler it
    builds, with its scale). ``zero``: the kernels are not called and every draw is 0, so that the
    released values are the counts and the applied threshold shows (Alg. 2's ``c >= T``)."""

    zero: bool = False
    draws: list[Draw] = field(default_factory=list)
    top_levels: list[tuple[int, Fraction]] = field(default_factory=list)

    def laplace(self, t: int, s: int, rng: object) -> int:
        value = 0 if self.zero else _LAPLACE(t, s, rng)  # type: ignore[arg-type]
        self.draws.append(Draw("laplace", Fraction(t, s), value))
        return value

    def gaussian(self, num: int, den: int, rng: object) -> int:
        value = 0 if self.zero else _GAUSSIAN(num, den, rng)  # type: ignore[arg-type]
        self.draws.append(Draw("gaussian", Fraction(num, den), value))
        return value

    def scales(self, kind: str) -> set[Fraction]:
        return {d.scale for d in self.draws if d.kind == kind}

    def values(self, kind: str) -> np.ndarray:
        return np.array([d.value for d in self.draws if d.kind == kind], dtype=np.int64)

    def clear(self) -> None:
        self.draws.clear()
        self.top_levels.clear()


def _install(monkeypatch: pytest.MonkeyPatch, recorder: NoiseRecorder) -> None:
    """Route every privstream module's reference to the kernels (outside ``privstream.noise``, whose
    own Gaussian sampler calls the Laplace kernel internally) through ``recorder``."""
    recording = recorder

    class RecordedTopNoiseLevels(TopNoiseLevels):
        def __init__(self, n: int, scale: Fraction, rng: object) -> None:
            recording.top_levels.append((n, Fraction(scale)))
            super().__init__(n, scale, rng)  # type: ignore[arg-type]

    patched = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("privstream.") or name.startswith("privstream.noise") or module is None:
            continue
        if getattr(module, "_discrete_laplace", None) is _LAPLACE:
            monkeypatch.setattr(module, "_discrete_laplace", recorder.laplace)
            patched += 1
        if getattr(module, "_discrete_gaussian", None) is _GAUSSIAN:
            monkeypatch.setattr(module, "_discrete_gaussian", recorder.gaussian)
            patched += 1
        if getattr(module, "TopNoiseLevels", None) is TopNoiseLevels:
            monkeypatch.setattr(module, "TopNoiseLevels", RecordedTopNoiseLevels)
    assert patched >= 3  # common (Laplace, Gaussian), pmg, domain_topk at least


Recorder = Callable[[bool], NoiseRecorder]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    def make(zero: bool) -> NoiseRecorder:
        rec = NoiseRecorder(zero=zero)
        _install(monkeypatch, rec)
        return rec

    yield make


def one_key(kind: str, count: int, k: int) -> object:
    """A sketch holding one item (7) with ``count``: Alg. 1 MG, standard MG or an exact histogram."""
    sketch = {
        "alg1": lambda: MisraGries(k),
        "standard": lambda: StandardMisraGries(k),
        "exact": ExactHistogram,
    }[kind]()
    sketch.update_batch(np.full(count, 7, dtype=np.int64))
    return sketch


def effective_threshold(rec: NoiseRecorder, kind: str, k: int, mechanism: str, budget: Budget) -> int:
    """T_eff: the smallest count c released with every draw scripted to 0 (bisection on c over
    [1, 2^14]; the release of one key is monotone in its count). Also checks T_eff − 1 is refused."""
    assert rec.zero

    def released(c: int) -> bool:
        out = release(one_key(kind, c, k), budget, mechanism=mechanism, rng=SeededRandomSource(c))
        assert out.mechanism == mechanism
        values = out.as_dict_items()
        assert values in ({}, {7: c}), values  # zero noise: the released value is the count itself
        return bool(values)

    lo, hi = 0, 2**14  # not released(lo) (count 0 is never stored), released(hi)
    assert released(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if released(mid) else (mid, hi)
    assert released(hi) and (hi == 1 or not released(hi - 1)) and released(hi + 1)
    return hi


# ---------------------------------------------------------------------------------------------------
# The papers' formulas, computed independently of privstream
# ---------------------------------------------------------------------------------------------------


def exact(eps: float) -> Fraction:
    """ε as the exact rational the ledger charges: its shortest decimal (0.7 -> 7/10)."""
    return Fraction(repr(eps))


def geometric_tail(m: int, scale: Fraction) -> float:
    """Pr[Z >= m] for the two-sided geometric Pr[Z = z] = (1−α)/(1+α)·α^|z|, α = e^{−1/scale},
    by summing the pmf (m >= 1)."""
    a = math.exp(-1 / float(scale))
    z = np.arange(m, m + 200 * int(math.ceil(float(scale))) + 200, dtype=float)
    return float((1 - a) / (1 + a) * np.exp(z * math.log(a)).sum())


def smallest_m(samples: float, scale: Fraction, delta: float, lower: int = 1) -> int:
    """min{m >= lower : samples·Pr[Z >= m] <= δ} by direct search."""
    m = lower
    while samples * geometric_tail(m, scale) > delta:
        m += 1
    return m


def pmg_alg1_threshold(eps: float, delta: float) -> int:
    """Lebeda–Tětek §5.2: 1 + 2⌈ln(6e^ε/((e^ε+1)δ))/ε⌉ (6 tail samples: 4 keys + 2 shared)."""
    closed = math.ceil(math.log(6 * math.exp(eps) / ((math.exp(eps) + 1) * delta)) / eps)
    assert closed == smallest_m(6, 1 / exact(eps), delta)  # the closed form is the union bound
    return 1 + 2 * closed


def pmg_standard_threshold(eps: float, delta: float, k: int) -> int:
    """Lebeda–Tětek §5.1, discrete: k + 1 tail samples (k differing keys + the shared one)."""
    return 1 + 2 * smallest_m(k + 1, 1 / exact(eps), delta)


def laplace_new_key_factor(eps: float, k: int) -> float:
    """C(ε, k) = max(k, max_{1<=n<=k} n·e^{ε(1−n/k)}), by brute force over every n."""
    return max(float(k), max(n * math.exp(eps * (1 - n / k)) for n in range(1, k + 1)))


def laplace_threshold_T(eps: float, delta: float, k: int) -> int:
    """min{T >= 2 : Pr[Z >= T−1]·C(ε, k) <= δ} for Z ~ discrete Laplace(k/ε)."""
    return 1 + smallest_m(laplace_new_key_factor(eps, k), k / exact(eps), delta)


def _discrete_gaussian_pmf(sigma2: float) -> tuple[np.ndarray, np.ndarray]:
    """Support [−R, R] (R = 60σ + 20; the omitted mass is < e^{−1800}) and the normalised pmf."""
    r = int(math.ceil(60 * math.sqrt(sigma2))) + 20
    ys = np.arange(-r, r + 1)
    log_w = -(ys.astype(float) ** 2) / (2 * sigma2)
    return ys, np.exp(log_w - logsumexp(log_w))


def gshm_delta_exact(eps: float, sigma2: float, tau: int, ell: int) -> float:
    """Lebeda–Tětek Thm 8.5's right-hand side for the discrete Gaussian N_Z(0, σ²) actually sampled:

    max( 1 − p^l,  max_j [1 − p^{l−j} + p^{l−j}·δ_j(ε − γ_j)],  max_j δ_j(ε + γ_j) ),
    γ_j = (l − j)·ln p,  p = Pr[a count-1 key is dropped] = Pr[1 + Y < 1 + τ] = Pr[Y <= τ − 1],

    and δ_j(e) the exact hockey-stick divergence of N_Z(0,σ²)^j against N_Z(1,σ²)^j: the privacy
    loss is L = Σ_i (1 − 2Y_i)/(2σ²) = (j − 2S)/(2σ²) with S = Y_1 + … + Y_j, so
    δ_j(e) = E[(1 − e^{e − L})_+], summed over the law of S (j-fold convolution of the pmf)."""
    ys, pmf = _discrete_gaussian_pmf(sigma2)
    log_p = math.log(float(pmf[ys <= tau - 1].sum()))
    worst = -math.expm1(ell * log_p)
    law, low = np.ones(1), 0
    for j in range(1, ell + 1):
        law, low = np.convolve(law, pmf), low + int(ys[0])
        loss = (j - 2 * np.arange(low, low + law.size)) / (2 * sigma2)

        def profile(e: float, law: np.ndarray = law, loss: np.ndarray = loss) -> float:
            return float(np.sum(law * np.clip(-np.expm1(e - loss), 0.0, None)))

        gamma = (ell - j) * log_p
        rest = math.exp(gamma)
        worst = max(worst, 1 - rest + rest * profile(eps - gamma), profile(eps + gamma))
    return worst


# ---------------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------------

BUDGET = Budget(EPS, DELTA)


def test_every_registered_mechanism_is_covered_here() -> None:
    """A new mechanism must get its recorded-parameter test here (and an entry in this set)."""
    assert set(names()) == {
        "pmg",
        "pmg_standard",
        "gshm",
        "laplace_threshold",
        "pure_topk",
        "chan_topk",
        "chan_pmg",
        "exact_threshold",
    }


@pytest.mark.parametrize("k", [4, 16])
def test_pmg_alg1_scale_and_threshold_are_lebeda_tetek_section_5_2(recorder: Recorder, k: int) -> None:
    """Alg. 2 (§5.2): one shared and k per-slot draws, all of scale exactly 1/ε, and keys kept iff
    c >= 1 + 2⌈ln(6e^ε/((e^ε+1)δ))/ε⌉ — a release with scale·0.9 or threshold − 1 fails here."""
    rec = recorder(True)
    expected = pmg_alg1_threshold(EPS, DELTA)
    assert effective_threshold(rec, "alg1", k, "pmg", BUDGET) == expected
    rec.clear()
    mg = MisraGries(k)
    mg.update_batch(np.repeat(np.arange(k), np.arange(expected - k // 2, expected + k - k // 2)))
    out = release(mg, BUDGET, mechanism="pmg", rng=SeededRandomSource(1))
    assert rec.scales("laplace") == {1 / EPS_EXACT} and not rec.scales("gaussian")
    assert len(rec.draws) == k + 1  # η once per release + Z_x for every one of the k slots
    assert out.as_dict_items() == {x: c for x, c in mg.counters().items() if c >= expected}
    assert dict(out.parameters)["threshold"] == expected


@pytest.mark.parametrize("k", [3, 4, 29])  # 3, 29: k and k + 1 tail samples give other thresholds
def test_pmg_standard_scale_and_threshold_are_lebeda_tetek_section_5_1(recorder: Recorder, k: int) -> None:
    """§5.1 on a standard MG sketch: scale 1/ε, threshold 1 + 2·min{m : (k+1)·Pr[Z >= m] <= δ}."""
    rec = recorder(True)
    expected = pmg_standard_threshold(EPS, DELTA, k)
    assert effective_threshold(rec, "standard", k, "pmg_standard", BUDGET) == expected
    rec.clear()
    mg = StandardMisraGries(k)
    mg.update_batch(np.repeat(np.arange(k - 1), expected))  # k − 1 stored keys
    out = release(mg, BUDGET, mechanism="pmg_standard", rng=SeededRandomSource(1))
    assert rec.scales("laplace") == {1 / EPS_EXACT} and not rec.scales("gaussian")
    assert len(rec.draws) == k  # η once + one Z_x per stored key (standard MG stores no zero counts)
    assert out.as_dict_items() == {x: expected for x in range(k - 1)}


@pytest.mark.parametrize(("eps", "delta", "k"), [(0.7, 1e-6, 4), (1.0, 1e-6, 8), (0.5, 1e-5, 4)])
def test_gshm_sigma_and_tau_used_satisfy_theorem_8_5_tightly(
    recorder: Recorder, eps: float, delta: float, k: int
) -> None:
    """Thm 8.5 (l = k), evaluated exactly for the discrete Gaussian: the σ² recorded at the sampler
    and the τ the release applies (T_eff = 1 + τ) give δ' <= δ, while 0.9·σ (σ²·0.81) or τ − 1 give
    δ' > δ. So a release sampling with σ 10 % too small, or keeping keys one below the calibrated
    threshold, fails this test (its recorded σ² or its T_eff no longer satisfies the condition)."""
    budget = Budget(eps, delta)
    rec = recorder(True)
    t_eff = effective_threshold(rec, "alg1", k, "gshm", budget)
    (sigma2,) = rec.scales("gaussian")  # one σ² for every draw of every release
    assert not rec.scales("laplace")
    tau = t_eff - 1
    s2 = float(sigma2)
    assert gshm_delta_exact(eps, s2, tau, k) <= delta
    assert gshm_delta_exact(eps, 0.81 * s2, tau, k) > delta  # σ·0.9 is not private at this δ
    assert gshm_delta_exact(eps, s2, tau - 1, k) > delta  # nor is the threshold one lower
    # one draw per non-zero count, none for zero counts (Thm 8.5 noises only the non-zero counts)
    rec.clear()
    mg = MisraGries(k)
    mg.update_batch(np.repeat(np.arange(k - 1), t_eff))
    out = release(mg, budget, mechanism="gshm", rng=SeededRandomSource(2))
    assert len(rec.draws) == k - 1 and rec.scales("gaussian") == {sigma2}
    assert out.as_dict_items() == {x: t_eff for x in range(k - 1)}


def test_gshm_draws_have_the_recorded_variance(recorder: Recorder) -> None:
    """The values the release draws (seeded, real noise) have variance σ²: catches a σ·0.9 inside
    the sampling path even when the σ² passed down is right. N = 4000 draws: the relative sd of the
    sample variance is √(2/N) ≈ 2.2 %, the test allows ±10 % (4.5 sd; false-failure probability
    ≈ 7e-6 for a correct sampler, and the seed is fixed), σ·0.9 shows as −19 % (≈ 8.5 sd)."""
    rec = recorder(False)
    k, rounds = 8, 500
    mg = MisraGries(k)
    mg.update_batch(np.repeat(np.arange(k), 1000))
    for r in range(rounds):
        release(mg, BUDGET, mechanism="gshm", rng=SeededRandomSource(f"gshm-law-{r}"))
    (sigma2,) = rec.scales("gaussian")
    values = rec.values("gaussian")
    assert values.size == k * rounds
    ratio = float(np.mean(values.astype(float) ** 2)) / float(sigma2)
    assert 0.9 < ratio < 1.1, ratio
    assert abs(float(values.mean())) < 5 * math.sqrt(float(sigma2) / values.size)  # centred: 5 sd


def test_pmg_draws_have_the_recorded_laplace_variance(recorder: Recorder) -> None:
    """The values PMG draws have the two-sided geometric variance 2α/(1−α)², α = e^{−ε}, for the
    recorded scale 1/ε. N = 65·300 = 19 500 draws: the relative sd of the sample second moment is
    √(5/N) ≈ 1.6 % (excess kurtosis 3); ±8 % is 5 sd (false-failure ≈ 6e-7, fixed seeds); a
    scale·0.9 inside the kernel shows as ≈ −19 % (> 11 sd)."""
    rec = recorder(False)
    k, rounds = 64, 300
    mg = MisraGries(k)
    mg.update_batch(np.repeat(np.arange(k), 50))
    for r in range(rounds):
        release(mg, BUDGET, mechanism="pmg", rng=SeededRandomSource(f"pmg-law-{r}"))
    assert rec.scales("laplace") == {1 / EPS_EXACT}
    values = rec.values("laplace").astype(float)
    assert values.size == (k + 1) * rounds
    a = math.exp(-EPS)
    ratio = float(np.mean(values**2)) / (2 * a / (1 - a) ** 2)
    assert 0.92 < ratio < 1.08, ratio


@pytest.mark.parametrize("k", [1, 4, 12])
def test_laplace_threshold_scale_and_threshold(recorder: Recorder, k: int) -> None:
    """Thresholded Laplace(k/ε) (Lebeda–Tětek §7): every draw has scale k/ε exactly, and keys are
    kept iff c >= min{T >= 2 : Pr[Z >= T−1]·C(ε, k) <= δ}; the threshold one lower violates δ."""
    rec = recorder(True)
    expected = laplace_threshold_T(EPS, DELTA, k)
    c = laplace_new_key_factor(EPS, k)
    assert (
        geometric_tail(expected - 2, k / EPS_EXACT) * c
        > DELTA
        >= geometric_tail(expected - 1, k / EPS_EXACT) * c
    )
    assert effective_threshold(rec, "alg1", k, "laplace_threshold", BUDGET) == expected
    assert rec.scales("laplace") == {k / EPS_EXACT} and not rec.scales("gaussian")


def test_exact_threshold_scale_and_threshold(recorder: Recorder) -> None:
    """exact_threshold on an exact histogram: scale 1/ε, T = min{T >= 2 : Pr[Z >= T−1] <= δ}."""
    rec = recorder(True)
    expected = 1 + smallest_m(1, 1 / EPS_EXACT, DELTA)
    assert effective_threshold(rec, "exact", 1, "exact_threshold", BUDGET) == expected
    assert rec.scales("laplace") == {1 / EPS_EXACT}


@pytest.mark.parametrize(
    ("mechanism", "scale", "floor"),
    [
        ("pure_topk", lambda k: 2 * (k + 1) / EPS_EXACT, None),  # §6: Laplace(2/ε) on the 1/(k+1) lattice
        ("chan_topk", lambda k: k / EPS_EXACT, None),  # Chan et al.: Laplace(k/ε)
        ("chan_pmg", lambda k: (k + 1) / EPS_EXACT, 1),  # Chan et al. Alg. 1: Geom(exp(ε/(k+1))), clamp
    ],
)
@pytest.mark.parametrize("domain_size", [40, 5000])
def test_domain_wide_pure_releases_draw_every_element_at_the_paper_scale(
    recorder: Recorder,
    mechanism: str,
    scale: Callable[[int], Fraction],
    floor: int | None,
    domain_size: int,
) -> None:
    """The ε-DP domain-wide releases noise every element of the declared domain (d draws, or the
    exact order statistics of the noise-only elements for a large domain) at the paper's scale."""
    k = 6
    rec = recorder(True)
    mg = MisraGries(k)
    mg.update_batch(np.repeat(np.arange(3), [5, 9, 2]))  # 3 stored keys, 3 zero-count slots
    out = release(
        mg, Budget(EPS, 0.0), mechanism=mechanism, rng=SeededRandomSource(3), domain=range(domain_size)
    )
    assert rec.scales("laplace") | {s for _, s in rec.top_levels} == {scale(k)}
    if domain_size <= 2048:
        assert len(rec.draws) == domain_size and not rec.top_levels
    else:  # stored keys (3; 2 after Alg. 3) drawn one by one, the N others by order statistics
        [(n, _)] = rec.top_levels
        assert len(rec.draws) in (2, 3) and len(rec.draws) + n == domain_size
    released = out.as_dict_items()
    if floor is not None:  # clamp at 0: only values >= 1; with zero noise only the positive counts
        assert all(v >= floor for v in released.values())
        assert domain_size > 2048 or released == {0: 5, 1: 9, 2: 2}
    assert len(released) <= k
