"""HeavyGuardian's exponential decay (docs/ldp.md, "Checks"): the exact b^−C decay frequency, replacement
only at count 0, ⊥ never replaces, the light part, warm start, fail-fast parameters."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from privstream.ldp.heavy_guardian import HeavyGuardian, Outcome, decays
from privstream.noise.rng import SeededRandomSource

B = Fraction(27, 25)


@pytest.mark.parametrize(("count", "expected"), [(0, 1.0), (1, 0.9259259), (10, 0.4631935)])
def test_decay_frequency_is_b_to_the_minus_c(count: int, expected: float) -> None:
    """40k draws of the exact Bernoulli(1.08^−C): |rate − b^−C| ≤ 4.5 sd (binomial), so a correct
    sampler fails with probability ≤ 6.8e-6 per case (normal approximation); seeded."""
    assert float(B**-count) == pytest.approx(expected, rel=1e-6)
    rng = SeededRandomSource(count)
    n = 40_000
    hits = sum(decays(count, B, rng) for _ in range(n))
    p = float(B**-count)
    assert abs(hits / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_weakest_cell_decays_at_b_minus_c_and_replacement_only_at_zero() -> None:
    """A full heavy part {0: 10, 1: 20}; item 9 arrives repeatedly: the weakest (0) decays at rate
    b^−C with C its current count, and 9 replaces it exactly when the count reaches 0."""
    hg = HeavyGuardian(2, rng=SeededRandomSource(11))
    hg.warm_start({0: 10, 1: 20})
    decays_at: dict[int, list[int]] = {}
    while True:
        before = hg.counts.get(0)
        if before is None:
            break
        result = hg.insert(9)
        decays_at.setdefault(before, []).append(result.outcome in (Outcome.DECAYED, Outcome.REPLACED))
        if result.outcome is Outcome.REPLACED:
            assert before == 1 and result.evicted == 0 and hg.counts == {9: 1, 1: 20}
        else:
            assert 0 in hg.counts and hg.counts[0] >= 1 and 9 not in hg.counts
    assert set(decays_at) == set(range(1, 11))  # one step at a time down to 1, then replaced


def test_bottom_never_replaces() -> None:
    hg = HeavyGuardian(2, rng=SeededRandomSource(2))
    hg.warm_start({3: 1, 4: 5})
    for _ in range(200):
        hg.decay_weakest()
    assert set(hg.counts) == {3, 4} and hg.counts[3] == 0  # decayed to 0 but never replaced
    assert hg.insert(8).outcome is Outcome.REPLACED and set(hg.counts) == {8, 4}


def test_cases_one_and_two() -> None:
    hg = HeavyGuardian(2, rng=SeededRandomSource(1))
    assert hg.insert(5).outcome is Outcome.NEW and hg.weakest_count() == 0
    assert hg.insert(5).outcome is Outcome.HIT
    assert hg.insert(6).outcome is Outcome.NEW and hg.full and hg.weakest_count() == 1
    assert hg.counts == {5: 2, 6: 1}


def test_memory_model_does_not_depend_on_domain() -> None:
    assert HeavyGuardian(20).size_bytes() == 160 and HeavyGuardian(20, 5).size_bytes() == 185


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"heavy_cells": 0}, "heavy_cells"),
        ({"light_cells": -1}, "light_cells"),
        ({"base": Fraction(1)}, "base"),
    ],
)
def test_bad_parameters(kwargs: dict, param: str) -> None:
    args = {"heavy_cells": 2} | kwargs
    with pytest.raises(ValueError, match=param):
        HeavyGuardian(**args)
    hg = HeavyGuardian(1)
    with pytest.raises(ValueError, match="counts"):
        hg.warm_start({1: 1, 2: 1})


@pytest.mark.parametrize("count", [Fraction(1, 2), Fraction(22, 7)])
def test_fractional_decay_frequency(count: Fraction) -> None:
    """Debiased counts are fractional: 40k draws of Bernoulli(1.08^−C) within 4.5 sd (false-failure
    rate ≤ 6.8e-6 per case, normal approximation; seeded); C ≤ 0 always decays."""
    rng = SeededRandomSource(str(count))
    n = 40_000
    p = float(B) ** -float(count)
    hits = sum(decays(count, B, rng) for _ in range(n))
    assert abs(hits / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n)
    assert decays(Fraction(-3, 2), B, rng) and decays(0, B, rng)


class _Bits:
    """A RandomSource returning fixed randbits values (to steer the lazy comparison)."""

    def __init__(self, values: list[int]) -> None:
        self.values = values

    def randbits(self, n: int) -> int:
        return self.values.pop(0)

    def randbelow(self, n: int) -> int:  # pragma: no cover - unused
        raise AssertionError


def test_lazy_comparison_decides_exactly_near_the_probability() -> None:
    """A uniform whose first 53 bits straddle (25/27)^(1/3) within the float slack is decided by
    the exact decimal refinement: the answer is [U < x] for the full 117-bit U."""
    from decimal import Decimal, localcontext

    from privstream.ldp.heavy_guardian import _bernoulli_fractional_power

    frac = Fraction(1, 3)
    with localcontext() as ctx:
        ctx.prec = 60
        x = Fraction((Decimal(25) / Decimal(27)) ** (Decimal(1) / Decimal(3)))
    u53 = math.floor(x * 2**53)
    for low_bits, expected_below in ((0, True), ((1 << 64) - 1, None)):
        u = (u53 << 64) | low_bits
        expected = Fraction(u + 1, 1 << 117) <= x if expected_below else Fraction(u, 1 << 117) < x
        assert _bernoulli_fractional_power(B, frac, _Bits([u53, low_bits])) is expected  # type: ignore[arg-type]
