"""OLH and HR frequency oracles (paper App. A.1): exact HR output distribution by enumeration,
unbiasedness within CLT bars, memory linear in d, fail-fast parameters."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from privstream.ldp import HadamardResponse, OptimisedLocalHashing
from privstream.ldp.hadamard import fwht
from privstream.noise.rng import SeededRandomSource


class _Scripted:
    """A RandomSource replaying fixed outcomes (for exact enumeration of a sampler's paths)."""

    def __init__(self, outcomes: list[int]) -> None:
        self.outcomes = list(outcomes)

    def randbits(self, n: int) -> int:  # pragma: no cover - unused
        raise AssertionError

    def randbelow(self, n: int) -> int:
        value = self.outcomes.pop(0)
        assert 0 <= value < n
        return value


def test_hr_output_distribution_is_exact() -> None:
    """Enumerate both outcomes of the side draw (u = 0 keeps "in C_v", u = W−1 leaves) and every
    column j: each column of C_v is reached by exactly 2 of the K paths with the "in" side, each
    complement column by 2 with the "out" side — Pr = 2r/(K(r+1)) and 2/(K(r+1)) (Eq. 5)."""
    d = 11
    probe = HadamardResponse(1.0, d)
    total = probe._grr.total_weight
    for v in range(d):
        members = {j for j in range(probe.K) if bin((v + 1) & j).count("1") % 2 == 0}
        assert len(members) == probe.K // 2
        for u, inside in ((0, True), (total - 1, False)):
            hits: Counter[int] = Counter()
            for j in range(probe.K):
                hr = HadamardResponse(1.0, d, rng=_Scripted([u, j]))  # type: ignore[arg-type]
                hits[hr.randomise(v)] += 1
            assert set(hits) == (members if inside else set(range(probe.K)) - members)
            assert set(hits.values()) == {2}


def test_fwht_matches_the_matrix() -> None:
    k = 8
    h = np.array([[(-1) ** bin(i & j).count("1") for j in range(k)] for i in range(k)])
    x = np.arange(k, dtype=float) ** 2
    assert np.allclose(fwht(x), h @ x)


@pytest.mark.parametrize("oracle", [HadamardResponse, OptimisedLocalHashing])
def test_unbiased(oracle: type) -> None:
    """n = 20k reports on d = 20 at ε = 1.5: every |ĉ − c| ≤ 4.5·sd with sd from Eq. (7) / Eq. (4)
    (HR: (r+1)²n/(r−1)²; OLH: 4n·e^ε/(e^ε−1)², g rounded so ×1.2 slack): false-failure rate
    ≤ 20 × 6.8e-6 per oracle (normal approximation); seeded."""
    d, n, eps = 20, 20_000, 1.5
    truth = [6000, 4000, 2000] + [500] * 16 + [0]
    rnd = np.random.default_rng(3)
    values = rnd.permutation(np.repeat(np.arange(d), truth)).tolist()
    randomiser = oracle(eps, d, rng=SeededRandomSource(oracle.__name__))
    aggregator = randomiser.new_aggregator()
    aggregator.add_all(randomiser.encode(v) for v in values)
    estimate = aggregator.estimate()
    e = math.exp(eps)
    sd = math.sqrt(
        n * ((e + 1) ** 2 / (e - 1) ** 2 if oracle is HadamardResponse else 1.2 * 4 * e / (e - 1) ** 2)
    )
    assert aggregator.n == n and estimate.shape == (d,)
    assert np.all(np.abs(estimate - np.array(truth)) <= 4.5 * sd), (estimate - np.array(truth)) / sd


def test_memory_grows_linearly_in_d() -> None:
    small = [HadamardResponse(1.0, 1000).new_aggregator(), OptimisedLocalHashing(1.0, 1000).new_aggregator()]
    large = [
        HadamardResponse(1.0, 100_000).new_aggregator(),
        OptimisedLocalHashing(1.0, 100_000).new_aggregator(),
    ]
    for a, b in zip(small, large, strict=True):
        assert 90 <= b.size_bytes() / a.size_bytes() <= 130


def test_reports_do_not_hold_values_and_bad_parameters_fail() -> None:
    hr = HadamardResponse(1.0, 5)
    with pytest.raises(ValueError, match="withheld"):
        hr.encode(99)
    with pytest.raises(ValueError, match="domain_size"):
        HadamardResponse(1.0, 1)
    with pytest.raises(ValueError, match="epsilon"):
        OptimisedLocalHashing(0.0, 5)
    olh = OptimisedLocalHashing(2.0, 5)
    assert olh.g == round(math.exp(2.0)) + 1 and len(olh.encode(3).payload) == 12
    with pytest.raises(ValueError, match="report"):
        olh.new_aggregator().add(hr.encode(1))


def test_olh_refuses_an_epsilon_whose_g_overflows_the_report() -> None:
    """g = round(e^ε) + 1 must stay below the hash prime 2^31 − 1 (y is sent in 4 bytes)."""

    assert OptimisedLocalHashing(21, 10).g < 2**31 - 1
    with pytest.raises(ValueError, match="epsilon: OLH needs g"):
        OptimisedLocalHashing(30, 10)
