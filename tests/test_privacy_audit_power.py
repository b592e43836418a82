"""Power of the empirical privacy audit (tests/test_privacy_audit.py): the same Clopper–Pearson
procedure must PASS each mechanism on its real calibration and FLAG the same sampler run with the
noise scale divided by 2 (a "2× too small" calibration error, true privacy loss ≈ 2ε).

Mechanisms: thresholded Laplace(k/ε), GSHM (discrete Gaussian σ, threshold 1 + τ) and chan_topk
(Laplace(k/ε) on a declared domain + top k), on the worst merged pair of the harness
(:func:`merged_pair_all_shifted`: all k counters differ by 1, one-signed). The 2×-too-small variant
calls the production sampling function with ε doubled (Laplace: scale k/(2ε), same threshold) or
σ² divided by 4 (GSHM: σ/2, same τ); production code is not modified.

Events (fixed before sampling; thresholds from a pilot run of the audited sampler on D with an
independent seed):

* SUM events: S = Σ_i (v_i − c_i(D)) over the k shifted keys, S >= s and S <= s at pilot quantiles
  (the likelihood-ratio statistic for Gaussian noise, hence the powerful test for GSHM);
* rectangle events: min_i (v_i − c_i(D)) >= m and max_i (v_i − c_i(D')) <= −m, m ∈ {0, 2}
  (the likelihood-ratio region for Laplace noise: its probability ratio is exactly e^{k/scale},
  i.e. e^ε for the real calibration and e^{2ε} for the halved one).

False-failure rate: each one-sided Clopper–Pearson bound fails with probability
α = 1e-3 / (2·2·#events), so a correct (ε, δ)-DP mechanism is flagged in one audit with probability
<= 1e-3 (union bound). Seeds are fixed, so every outcome here is deterministic.

Power (measured with these seeds, k = 4, ε = 1, δ = 1e-3, n = 20000 (40000 for GSHM) per side):
every halved-noise variant is flagged; empirical ε lower bounds (real → halved):
laplace_threshold 0.73 → 1.74, GSHM 0.53 → 1.44, chan_topk 0.74 → 1.75 (asserted: no violation at the
real calibration, which already bounds the empirical ε by ε; halved > 1.3·ε with a violation). GSHM's discrete-Gaussian sampler is fast enough
(~1e5 draws/s), so the production per-coordinate sampler is audited directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from privstream.mechanisms.chan import chan_values
from privstream.mechanisms.domain_topk import declared_domain
from privstream.mechanisms.gshm import calibrate_gshm, gshm_release
from privstream.mechanisms.laplace_threshold import laplace_threshold, laplace_threshold_release
from privstream.noise import SeededRandomSource
from privstream.noise.rng import RandomSource
from tests.test_privacy_audit import (
    DELTA,
    EPS,
    audit_hits,
    check_one_signed,
    merged_pair_all_shifted,
)

K = 4
MISSING = -(10**9)  # value of an unreleased key: below every threshold event

Sampler = Callable[[dict, RandomSource], tuple]


def values_matrix(sampler: Sampler, counts: dict, keys: list, seed: int, n: int) -> np.ndarray:
    """n releases as an (n, len(keys)) int64 array of released values (MISSING if not released)."""
    rng = SeededRandomSource(seed)
    out = np.full((n, len(keys)), MISSING, dtype=np.int64)
    col = {x: j for j, x in enumerate(keys)}
    for i in range(n):
        for x, v in sampler(counts, rng):
            if x in col:
                out[i, col[x]] = v
    return out


def build_events(
    pilot: np.ndarray, c_big: np.ndarray, c_small: np.ndarray
) -> list[Callable[[np.ndarray], np.ndarray]]:
    """SUM events at pilot quantiles and rectangle events (module docstring); each maps an
    (n, k) value array to a boolean array."""

    def total(v: np.ndarray) -> np.ndarray:
        return np.where(v == MISSING, MISSING, v - c_big).sum(axis=1)

    s = total(pilot)
    qs = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99)
    hi_cuts = sorted({int(np.quantile(s, q)) for q in qs})
    lo_cuts = sorted({int(np.quantile(s, 1 - q)) for q in qs})
    events: list[Callable[[np.ndarray], np.ndarray]] = []
    events += [lambda v, c=c: total(v) >= c for c in hi_cuts]
    events += [lambda v, c=c: total(v) <= c for c in lo_cuts]
    for m in (0, 2):
        events.append(lambda v, m=m: (v - c_big).min(axis=1) >= m)
        events.append(lambda v, m=m: np.where(v == MISSING, MISSING, v - c_small).max(axis=1) <= -m)
    return events


def audit_arrays(
    a: np.ndarray, b: np.ndarray, events: list[Callable[[np.ndarray], np.ndarray]]
) -> tuple[list[str], float]:
    """The harness's :func:`audit_hits` on arrays of outputs: (violations, best lower bound on ε)."""
    return audit_hits([(int(event(a).sum()), int(event(b).sum())) for event in events], len(a), len(b))


def run_audit(sampler: Sampler, n: int, seed: int) -> tuple[list[str], float]:
    big, small = merged_pair_all_shifted(K, 150)
    check_one_signed(big, small, K)
    cb, cs = big.counters(), small.counters()
    keys = sorted(cb.keys() | cs.keys(), key=str)
    c_big = np.array([cb[x] for x in keys], dtype=np.int64)
    c_small = np.array([cs[x] for x in keys], dtype=np.int64)
    a = values_matrix(sampler, cb, keys, seed, n)
    b = values_matrix(sampler, cs, keys, seed + 1, n)
    pilot = values_matrix(sampler, cb, keys, seed + 2, 4000)
    assert (a != MISSING).all()  # the shifted keys (~140) are always released: the audited regime
    return audit_arrays(a, b, build_events(pilot, c_big, c_small))


# ---------------------------------------------------------------------------------------------
# Samplers: production sampling functions; ``factor`` = 2 divides the noise scale by 2.


def laplace_threshold_sampler(factor: int) -> Sampler:
    thr = laplace_threshold(EPS, DELTA, K)  # the production threshold, kept for the halved variant
    return lambda counts, rng: laplace_threshold_release(counts, factor * EPS, thr, K, rng)


def gshm_sampler(factor: int) -> Sampler:
    params = calibrate_gshm(EPS, DELTA, K)
    params = dataclasses.replace(params, sigma2=params.sigma2 / (factor * factor))  # σ/factor, same τ
    return lambda counts, rng: gshm_release(counts, params, rng)


DOMAIN = declared_domain(range(16))


def chan_topk_sampler(factor: int) -> Sampler:
    # chan_topk's calibration: Δ = k, scale Δ/ε (privstream.mechanisms.chan_topk)
    return lambda counts, rng: chan_values(counts, factor * EPS, K, K, DOMAIN, rng, clamp=False)


def chan_pmg_sampler(factor: int) -> Sampler:
    # chan_pmg's calibration: Geom(exp(ε/(k+1))), clamp at 0, top k (privstream.mechanisms.chan_pmg)
    return lambda counts, rng: chan_values(counts, factor * EPS, K, K + 1, DOMAIN, rng, clamp=True)


CASES = {
    "laplace_threshold": (laplace_threshold_sampler, 20000, 31),
    "gshm": (gshm_sampler, 40000, 41),
    "chan_topk": (chan_topk_sampler, 20000, 51),
    "chan_pmg": (chan_pmg_sampler, 20000, 61),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_audited_sampler_is_the_registered_release(name: str) -> None:
    """Each power sampler above (factor 1) is exactly what ``release(..., mechanism=name)`` draws
    with the same source, so a registered wrapper passing another ε or σ is caught by the audits."""
    from privstream.accounting import Budget
    from privstream.mechanisms import release

    big, _ = merged_pair_all_shifted(K, 150)
    make, _, _ = CASES[name]
    for seed in range(3):
        want = make(1)(big.counters(), SeededRandomSource(seed))
        got = release(big, Budget(EPS, DELTA), mechanism=name, rng=SeededRandomSource(seed), domain=range(16))
        assert tuple(got.items) == tuple(want), name


@pytest.mark.parametrize("name", list(CASES))
def test_audit_passes_real_calibration(name: str) -> None:
    """Real calibration: no violation (false-failure rate <= 1e-3; deterministic with fixed seeds)."""
    make, n, seed = CASES[name]
    violations, eps_lower = run_audit(make(1), n, seed)
    print(f"{name} real: eps_lower={eps_lower:.3f}")
    assert not violations, violations


@pytest.mark.parametrize("name", list(CASES))
def test_audit_flags_noise_two_times_too_small(name: str) -> None:
    """Noise scale / 2 (true loss ≈ 2ε on these neighbours): the same audit reports a violation."""
    make, n, seed = CASES[name]
    violations, eps_lower = run_audit(make(2), n, seed)
    print(f"{name} halved: eps_lower={eps_lower:.3f}")
    assert violations
    assert eps_lower > 1.3 * EPS
