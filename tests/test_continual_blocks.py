"""PCC's block structure (Chan, Li, Shi, Xu §3.3): parameters, λ rounding, block life cycle and the
window cover, checked against the paper's worked numbers and brute force over the definitions."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from privstream.continual.blocks import (
    BlockId,
    active_leaves,
    block_containing,
    completed_at,
    is_expired,
    pcc_params,
    round_lambda,
    window_cover,
)


def test_worked_parameter_example() -> None:
    """λ = 1/64, W = 2^20, ε = 1: W_0 = 4096, ℓ = 8, β_i = 18·2^i, ε_i = 2^(i−9), Σε_i = 0.998046875."""
    p = pcc_params(1, Fraction(1, 64), 2**20)
    assert (p.w0, p.levels, p.lam, p.epsilon) == (4096, 8, Fraction(1, 64), 1)
    assert p.w0 * 2**p.levels == p.window
    for i in range(9):
        assert p.level_beta(i) == 18 * 2**i
        assert p.level_epsilon(i) == Fraction(2**i, 2**9)
        assert p.level_lambda(i) == Fraction(1, 9 * 2**i)
        assert p.level_size(i) == 4096 * 2**i
        assert p.level_lambda(i) * p.level_size(i) == Fraction(4096, 9)  # same per-block target
        assert Fraction(1, 9728) <= p.level_epsilon(i) / (p.level_beta(i) + 1) <= Fraction(1, 9218)
        assert p.level_scale(i) == (p.level_beta(i) + 1) / p.level_epsilon(i)
    assert p.total_epsilon == Fraction(0.998046875) == 1 - Fraction(1, 2**9)


@pytest.mark.parametrize(
    ("lam", "rounded"),
    [
        (Fraction(1, 8), Fraction(1, 8)),  # 1/λ a power of 2: kept (the strict rule applies only otherwise)
        (0.125, Fraction(1, 8)),
        (0.5, Fraction(1, 2)),
        (Fraction(1, 2**20), Fraction(1, 2**20)),
        (0.1, Fraction(1, 16)),  # 1/16 < 0.1 < 1/8
        (Fraction(1, 8) + Fraction(1, 10**9), Fraction(1, 8)),
        (Fraction(1, 8) - Fraction(1, 10**9), Fraction(1, 16)),
        (Fraction(1, 3), Fraction(1, 4)),
        (0.99, Fraction(1, 2)),
        (Fraction(1, 11 * 10), Fraction(1, 128)),
    ],
)
def test_lambda_rounding_strict_rule(lam: object, rounded: Fraction) -> None:
    assert round_lambda(lam) == rounded
    p = pcc_params(1, lam, 1000)
    assert p.lam == rounded and 2**p.levels == 4 / rounded
    assert p.w0 == math.ceil(rounded * 1000 / 4)


def test_lambda_rounding_is_max_power_strictly_below() -> None:
    for num in range(1, 200):
        lam = Fraction(num, 200)
        powers = [Fraction(1, 2**k) for k in range(1, 20)]
        expected = lam if lam in powers else max(q for q in powers if q < lam)
        assert round_lambda(lam) == expected


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"epsilon": "1"}, "epsilon"),
        ({"epsilon": True}, "epsilon"),
        ({"lam": 0}, "lam"),
        ({"lam": 1}, "lam"),
        ({"lam": 1.5}, "lam"),
        ({"lam": -0.25}, "lam"),
        ({"lam": None}, "lam"),
        ({"window": 0}, "window"),
        ({"window": 2.0}, "window"),
        ({"window": True}, "window"),
    ],
)
def test_bad_parameters_fail_fast_naming_the_parameter(kwargs: dict, name: str) -> None:
    args = {"epsilon": 1, "lam": 0.25, "window": 100} | kwargs
    with pytest.raises(ValueError, match=f"^{name}: "):
        pcc_params(**args)


def test_level_methods_reject_levels_outside_0_to_l() -> None:
    p = pcc_params(1, 0.25, 100)
    for bad in (-1, p.levels + 1):
        for method in (p.level_epsilon, p.level_lambda, p.level_beta, p.level_size):
            with pytest.raises(ValueError, match="^level: "):
                method(bad)


CASES = [(Fraction(1, 2), 7), (Fraction(1, 2), 16), (Fraction(1, 4), 50), (Fraction(1, 8), 100), (0.1, 333)]


def brute_active_leaves(p, t: int) -> set[int]:  # type: ignore[no-untyped-def]
    """The definition: level-0 blocks complete by t whose first step is in the window."""
    return {j for j in range(1, t + 2) if t - p.window + 1 <= (j - 1) * p.w0 + 1 and j * p.w0 <= t}


@pytest.mark.parametrize(("lam", "window"), CASES)
def test_window_cover_tiles_the_active_leaf_range(lam: object, window: int) -> None:
    p = pcc_params(1, lam, window)
    for t in range(1, 4 * window + 3 * p.w0):
        leaves = brute_active_leaves(p, t)
        assert set(active_leaves(p, t)) == leaves
        cover = window_cover(p, t)
        covered: list[int] = []
        for b in cover:
            assert 0 <= b.level <= p.levels and b.index >= 1
            assert b.end(p) <= t and not is_expired(p, b, t)  # active at its own level
            covered += range((b.start(p) - 1) // p.w0 + 1, b.end(p) // p.w0 + 1)
        assert sorted(covered) == sorted(leaves)  # disjoint and exactly the active range
        per_level = [sum(b.level == i for b in cover) for i in range(p.levels + 1)]
        assert max(per_level, default=0) <= 2
        assert len(leaves) <= 2**p.levels  # W_0·2^ℓ >= W: levels 0..ℓ suffice
        if t >= window + p.w0:  # a full window: the leaves cover all but < 2·W_0 of it
            assert window - 2 * p.w0 < p.w0 * len(leaves) <= window


@pytest.mark.parametrize(("lam", "window"), CASES)
def test_completion_and_expiry_match_the_definitions(lam: object, window: int) -> None:
    p = pcc_params(1, lam, window)
    for t in range(1, 3 * window):
        done = completed_at(p, t)
        brute = [
            BlockId(i, j) for i in range(p.levels + 1) for j in range(1, t + 1) if j * p.level_size(i) == t
        ]
        assert done == brute
        for i in range(p.levels + 1):
            b = block_containing(p, i, t)
            assert b.start(p) <= t <= b.end(p)
            for j in range(1, t // p.level_size(i) + 2):
                blk = BlockId(i, j)
                assert is_expired(p, blk, t) == ((j - 1) * p.level_size(i) + 1 < t - window + 1)


def test_the_top_level_is_used_only_for_a_full_aligned_window() -> None:
    p = pcc_params(1, Fraction(1, 2), 16)  # W_0 = 2, 8 leaves = W
    tops = [t for t in range(1, 100) if any(b.level == p.levels for b in window_cover(p, t))]
    assert tops == [16 * j for j in range(1, 7)]
