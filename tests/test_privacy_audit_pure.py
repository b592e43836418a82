"""Empirical privacy audit of the pure ε-DP domain releases, with its power check: ``pure_topk``
(Lebeda–Tětek §6: Alg. 3, discrete Laplace of scale 2/ε on the 1/(k+1) lattice, top k of the
declared domain, values rounded) and ``release_partitions`` (§7: Alg. 3 per partition, key-wise
sum, the same release). The harness is tests/test_privacy_audit.py (Clopper–Pearson check) with the
SUM and rectangle events of tests/test_privacy_audit_power.py. The audited sampler is the registered
``pure_topk`` sampler calibrated once, which draws exactly what :func:`release` and
:func:`release_partitions` release (asserted with shared seeds); "2× too small" noise is the same
sampler calibrated for ε doubled (scale 1/ε instead of 2/ε), i.e. the entry point called with 2ε.

Neighbours: Lemma 6.2's worst case for k = 4 (a search over 3000 random streams and each of their
one-event deletions found no larger ℓ1): D' = D minus one event of a key x stored with 3 others, no decrement; Alg. 3's
values then differ by +k/(k+1) on x and −1/(k+1) on the 3 others, ℓ1 = (2k−1)/(k+1) = 1.4 < 2. The
true privacy loss is ε·ℓ1/2 = 0.7ε at the real calibration and 1.4ε with the noise halved. For
:func:`release_partitions`, one of three partitions changes that way (the others unchanged).

Events: the keys whose value is lower in D are negated (v ↦ −v), so the difference is one-signed
and the power harness's events apply: SUM events at pilot quantiles and the rectangle events whose
every coordinate is a tail region beyond *both* neighbours' lattice values (the Laplace likelihood
ratio region: probability ratio exactly e^{ℓ1/scale}). Rounding to integers is post-processing; the
rectangle cuts are the integers whose tail regions start closest to those lattice values, and the
counts are chosen so that most start exactly there (power only: any fixed event is a valid check).

Limit: this is the k = 4 worst case, ℓ1 = 1.4. For larger k the worst case (2k−1)/(k+1) approaches
2, so a calibration between 1.4/ε and 2/ε (safe at k = 4, not for every k) would pass this audit.
That Alg. 3's ℓ1 stays below 2 — what the scale 2/ε rests on — is checked
by a property test over random streams and every one-event deletion, k ≤ 5
(tests/test_sketch_sensitivity_reduction.py, Lemma 6.2).

False-failure rate: each one-sided Clopper–Pearson bound fails with probability
α = 1e-3 / (2·2·#events), so a correct ε-DP mechanism is flagged in one audit with probability
<= 1e-3 (union bound). Seeds are fixed, so every outcome here is deterministic.

Measured with these seeds (n = 40000 per side, ε = 1): empirical ε lower bounds (real → halved)
pure_topk 0.50 → 1.14, release_partitions 0.53 → 1.16 (asserted: no violation at the real
calibration; a violation and a lower bound > 1.05·ε with the noise halved).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import pytest

from privstream.accounting import Budget
from privstream.mechanisms import Request, get, release, release_partitions
from privstream.mechanisms.domain_topk import declared_domain
from privstream.noise import SeededRandomSource
from privstream.sketches import MisraGries, ReducedSketch, reduce_sensitivity, sum_reduced
from tests.test_privacy_audit import EPS
from tests.test_privacy_audit_power import MISSING, audit_arrays, build_events, values_matrix

K = 4
KEYS = [0, 1, 2, 3]  #: x = 0 gains the event; 1, 2, 3 are the other stored keys
DOMAIN = range(6)  #: 2 noise-only elements compete for the top k as well
#: counts in D' (x = 500): total 2007 ≡ 2 (mod 5), so D's Alg. 3 values are ≡ 2 (mod k+1) lattice
#: units and the tail regions of the keys that lose value start exactly at them
COUNTS = {0: 500, 1: 501, 2: 502, 3: 504}
#: the unchanged partitions of release_partitions: totals ≡ 0 (mod 5) keep that alignment
OTHER_PARTITIONS = ({0: 10, 1: 10, 2: 10, 3: 10}, {0: 5, 1: 5, 2: 5, 3: 5})


def sketch_of(counts: dict[int, int], extra: Sequence[int] = ()) -> MisraGries:
    mg = MisraGries(K)
    for x in [x for x, c in counts.items() for _ in range(c)] + list(extra):
        mg.update(x)
    return mg


def neighbours() -> tuple[MisraGries, MisraGries]:
    """(D, D'): D = D' plus one event of x = 0, appended last."""
    return sketch_of(COUNTS, [0]), sketch_of(COUNTS)


def partition_neighbours() -> tuple[list[MisraGries], list[MisraGries]]:
    """The middle one of three partitions changes as in :func:`neighbours`."""
    first, last = (sketch_of(c) for c in OTHER_PARTITIONS)
    big, small = neighbours()
    return [first, big, last], [first, small, last]


def prepared(sketch: object) -> ReducedSketch:
    """What the entry point noises: Alg. 3 of the sketch, or the key-wise sum over a list of
    partition sketches (:func:`release_partitions`)."""
    parts = sketch if isinstance(sketch, list) else [sketch]
    return sum_reduced([reduce_sensitivity(s) for s in parts])


MECH = get("pure_topk")
Sampler = Callable[[ReducedSketch, SeededRandomSource], tuple]


def sampler(factor: int, partitions: int) -> Sampler:
    """The registered sampler that :func:`release` / :func:`release_partitions` run for budget
    ε = factor·EPS, calibrated once (test_the_audited_sampler_is_the_release)."""
    budget = Budget(factor * EPS)
    request = Request(K, budget, 0.05, declared_domain(DOMAIN), "", partitions=partitions)
    calibration = MECH.calibrate(request)
    return lambda reduced, rng: MECH.sample(reduced, request, calibration, rng)


def rounded(v: int) -> int:
    """The released integer of lattice value v: nearest, halves up (pure_topk's post-processing)."""
    return math.floor(Fraction(v, K + 1) + Fraction(1, 2))


def tail_cuts(a: int, b: int) -> tuple[int, int]:
    """Cuts for one key, in the sign-flipped output space where D's value a > D''s value b:
    (smallest c whose region ``output >= c`` lies above a, largest c whose region ``output <= c``
    lies below b), for the rounded output (``rounded`` is non-decreasing)."""
    if a > b:
        return rounded(a - 1) + 1, rounded(b + 1) - 1
    return -(rounded(a + 1) - 1), -(rounded(b - 1) + 1)  # the key is negated


def run_audit(factor: int, name: str, seed: int, n: int) -> tuple[list[str], float]:
    big, small = (prepared(s) for s in CASES[name]())
    la, lb = big.numerators, small.numerators
    diff = sorted(la[x] - lb[x] for x in KEYS)
    assert diff == [-1, -1, -1, K] and sum(map(abs, diff)) == 2 * K - 1  # Lemma 6.2's worst case
    sign = np.array([1 if la[x] > lb[x] else -1 for x in KEYS], dtype=np.int64)
    cuts = [tail_cuts(la[x], lb[x]) for x in KEYS]
    c_big = np.array([c for c, _ in cuts], dtype=np.int64)
    c_small = np.array([c for _, c in cuts], dtype=np.int64)
    noise = sampler(factor, big.partitions)
    a = values_matrix(noise, big, KEYS, seed, n)
    b = values_matrix(noise, small, KEYS, seed + 1, n)
    pilot = values_matrix(noise, big, KEYS, seed + 2, 4000)
    for v in (a, b, pilot):
        assert (v != MISSING).all()  # the 4 stored keys (~100) always win the top k: the audited regime
    events = build_events(pilot * sign, c_big, c_small)
    return audit_arrays(a * sign, b * sign, events)


CASES = {"pure_topk": neighbours, "release_partitions": partition_neighbours}
SEEDS = {"pure_topk": 91, "release_partitions": 101}
N = 40000


@pytest.mark.parametrize("factor", [1, 2])
def test_the_audited_sampler_is_the_release(factor: int) -> None:
    """The audited sampler draws what the entry points release, at ε and at 2ε (the same seeds;
    a few of them, since rounding can hide a different noise scale in one release)."""
    budget = Budget(factor * EPS)
    single, split = sampler(factor, 1), sampler(factor, 3)
    for seed in range(5):
        for sketch in neighbours():
            stated = release(
                sketch, budget, mechanism="pure_topk", domain=DOMAIN, rng=SeededRandomSource(seed)
            )
            assert stated.items == single(prepared(sketch), SeededRandomSource(seed))
        for parts in partition_neighbours():
            stated = release_partitions(parts, budget, domain=DOMAIN, rng=SeededRandomSource(seed))
            assert stated.items == split(prepared(parts), SeededRandomSource(seed))


@pytest.mark.parametrize("name", list(CASES))
def test_audit_passes_real_calibration(name: str) -> None:
    violations, eps_lower = run_audit(1, name, SEEDS[name], N)
    print(f"{name} real: eps_lower={eps_lower:.3f}")
    assert not violations, violations


@pytest.mark.parametrize("name", list(CASES))
def test_audit_flags_noise_two_times_too_small(name: str) -> None:
    """Scale 1/ε (true loss 1.4ε on these neighbours): the same audit reports a violation."""
    violations, eps_lower = run_audit(2, name, SEEDS[name], N)
    print(f"{name} halved: eps_lower={eps_lower:.3f}")
    assert violations
    assert eps_lower > 1.05 * EPS
