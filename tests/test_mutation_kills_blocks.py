"""PCC's dyadic block structure (``privstream.continual.blocks``) against Chan–Li–Shi–Xu §3.3, written out.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py blocks``). Every value the
module derives is compared with an independent computation from the paper's definitions, done
here with plain integer / rational arithmetic and brute-force scans (never with the module's own
helpers):

* λ is rounded to λ′ = λ if 1/λ is a power of 2, else max{1/2^k : 1/2^k < λ} (the strict rule);
  ℓ = log2(4/λ′), W_0 = ⌈λ′W/4⌉, W_i = 2^i·W_0 (levels i = 0..ℓ);
* ε_i = ε/2^(ℓ−i+1), λ_i = 1/(2^i(ℓ+1)), β_i = ⌈2/λ_i⌉ = 2^(i+1)(ℓ+1), noise scale (β_i+1)/ε_i, and
  Σ_i ε_i = ε(1 − 2^−(ℓ+1)) (Lemma 3);
* block j >= 1 of level i covers steps [(j−1)W_i+1, jW_i]: it completes at t = jW_i, contains t iff
  (j−1)W_i+1 <= t <= jW_i, and is expired at t iff (j−1)W_i+1 < t−W+1;
* the active leaves at t are the level-0 blocks complete by t with their first step in the window;
  the window cover is the greedy dyadic cover of their union, left to right, taking at each step
  the highest level (<= ℓ) whose block starts there and ends inside the range — computed here by
  scanning the blocks of every level from their definition, in time steps.

Boundaries are hit on purpose: t one before, at and one after a block end and an expiry, W not a
multiple of anything, λ not a power of 1/2, ℓ larger than the range needs. The parameter checks
are pinned too: every bad ε, λ, W or level raises ValueError whose message starts with the
parameter's name (a level's message states the range 0..ℓ, as :func:`check_int` documents).
Deterministic, no randomness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from privstream.continual.blocks import (
    BlockId,
    PccParams,
    active_leaves,
    block_containing,
    check_lambda,
    completed_at,
    is_expired,
    pcc_params,
    round_lambda,
    window_cover,
)

# ---- the paper's parameters, written out -------------------------------------------------------


def as_rational(x: object) -> Fraction:
    """The rational a float stands for (its shortest decimal repr), as the project's ledger reads it."""
    if isinstance(x, float):
        return Fraction(repr(x))
    return Fraction(x)  # type: ignore[arg-type]


def ref_lambda(lam: Fraction) -> Fraction:
    """λ′: λ if 1/λ is a power of 2, else the largest 1/2^k strictly below λ (k >= 1)."""
    powers = [Fraction(1, 2**k) for k in range(1, 1200)]
    if lam in powers:
        return lam
    return max(q for q in powers if q < lam)


@dataclass(frozen=True)
class Ref:
    epsilon: Fraction
    lam: Fraction
    window: int
    w0: int
    ell: int

    def size(self, i: int) -> int:  # W_i
        return 2**i * self.w0

    def eps(self, i: int) -> Fraction:  # ε_i
        return self.epsilon / 2 ** (self.ell - i + 1)

    def beta(self, i: int) -> int:  # β_i
        return 2 ** (i + 1) * (self.ell + 1)

    def start(self, i: int, j: int) -> int:
        return (j - 1) * self.size(i) + 1

    def end(self, i: int, j: int) -> int:
        return j * self.size(i)


def ref_params(epsilon: object, lam: object, window: int) -> Ref:
    eps, lam_r = as_rational(epsilon), ref_lambda(as_rational(lam))
    ell = 0
    while 2**ell * lam_r != 4:  # ℓ = log2(4/λ′)
        ell += 1
    num, den = lam_r.numerator * window, lam_r.denominator * 4  # λ′W/4
    w0 = num // den + (1 if num % den else 0)  # the ceiling
    return Ref(eps, lam_r, window, w0, ell)


LAMBDAS = [
    Fraction(1, 2),
    0.25,
    Fraction(1, 8),
    Fraction(1, 64),
    0.3,
    Fraction(1, 3),
    0.7,
    0.999,
    Fraction(3, 7),
    0.01,
    Fraction(1, 1000),
    Fraction(1, 2**30),
]
WINDOWS = [1, 2, 3, 5, 16, 17, 100, 1001, 4096, 10**6 + 7]
EPSILONS = [1, 0.1, Fraction(3, 7), 2.5, Fraction(1, 10**6), 7]


@pytest.mark.parametrize("lam", LAMBDAS)
def test_parameters_are_the_papers(lam: object) -> None:
    """Every field and per-level value of pcc_params against §3.3, for λ on and off the powers of 1/2."""
    for window in WINDOWS:
        for epsilon in EPSILONS:
            r = ref_params(epsilon, lam, window)
            p = pcc_params(epsilon, lam, window)
            assert isinstance(p, PccParams)
            assert (p.epsilon, p.lam, p.window, p.w0, p.levels) == (r.epsilon, r.lam, window, r.w0, r.ell)
            assert type(p.w0) is int and type(p.levels) is int and type(p.window) is int
            assert type(p.epsilon) is Fraction and type(p.lam) is Fraction
            assert p.w0 * 2**p.levels >= window  # levels 0..ℓ suffice for one window
            for i in range(r.ell + 1):
                assert p.level_epsilon(i) == r.eps(i)
                assert p.level_lambda(i) == Fraction(1, 2**i * (r.ell + 1))
                assert p.level_beta(i) == r.beta(i) and type(p.level_beta(i)) is int
                assert p.level_size(i) == r.size(i) and type(p.level_size(i)) is int
                assert p.level_scale(i) == Fraction(r.beta(i) + 1) / r.eps(i)
            total = p.total_epsilon
            assert type(total) is Fraction
            assert total == r.epsilon * (1 - Fraction(1, 2 ** (r.ell + 1)))
            assert total == sum((r.eps(i) for i in range(r.ell + 1)), Fraction(0)) < r.epsilon


def test_worked_non_power_of_two_examples() -> None:
    """Hand-computed: λ = 0.3 -> 1/4 (ℓ = 4), W = 1001 -> W_0 = ⌈1001/16⌉ = 63; λ = 0.999 -> 1/2
    (ℓ = 3), W = 17 -> W_0 = 3; λ = 1/1000 -> 1/1024 (ℓ = 12), W = 5 -> W_0 = 1."""
    p = pcc_params(0.1, 0.3, 1001)
    assert (p.lam, p.levels, p.w0, p.epsilon) == (Fraction(1, 4), 4, 63, Fraction(1, 10))
    assert [p.level_beta(i) for i in range(5)] == [10, 20, 40, 80, 160]
    eps = [Fraction(1, 320), Fraction(1, 160), Fraction(1, 80), Fraction(1, 40), Fraction(1, 20)]
    assert [p.level_epsilon(i) for i in range(5)] == eps  # 0.1/2^(5−i)
    assert p.level_scale(0) == 11 * 320 and p.level_scale(4) == 161 * 20
    assert p.total_epsilon == Fraction(31, 320)
    p = pcc_params(1, 0.999, 17)
    assert (p.lam, p.levels, p.w0) == (Fraction(1, 2), 3, 3)
    p = pcc_params(1, Fraction(1, 1000), 5)
    assert (p.lam, p.levels, p.w0) == (Fraction(1, 1024), 12, 1)
    assert p.total_epsilon == 1 - Fraction(1, 2**13)


@pytest.mark.parametrize(
    "lam", [Fraction(1, 2), 0.5, Fraction(1, 4), 0.3, 0.7, Fraction(2, 3), 0.999, 0.1, Fraction(1, 5), 1e-9]
)
def test_round_and_check_lambda(lam: object) -> None:
    exact = as_rational(lam)
    assert check_lambda(lam) == exact and type(check_lambda(lam)) is Fraction
    assert round_lambda(lam) == ref_lambda(exact) and type(round_lambda(lam)) is Fraction


# ---- the parameter checks ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [1, 1.0, Fraction(1), Fraction(10**9 + 1, 10**9), 1.5, 2, 0, 0.0, -0.5])
def test_lambda_outside_0_1_is_refused(bad: object) -> None:
    """0 < λ < 1 (λ = 1 exactly included: it would round to 1/2 and run with ℓ = 3)."""
    for call in (check_lambda, round_lambda):
        with pytest.raises(ValueError, match="^lam: "):
            call(bad)
    with pytest.raises(ValueError, match="^lam: "):
        pcc_params(1, bad, 100)


@pytest.mark.parametrize(
    "bad", [True, False, np.bool_(True), "0.5", None, float("inf"), float("-inf"), float("nan"), 1j]
)
def test_lambda_that_is_no_finite_real_is_refused(bad: object) -> None:
    for call in (check_lambda, round_lambda):
        with pytest.raises(ValueError, match="^lam: "):
            call(bad)


def test_lambda_just_below_1_and_tiny_are_accepted() -> None:
    assert round_lambda(Fraction(10**9 - 1, 10**9)) == Fraction(1, 2)
    assert round_lambda(5e-324) == ref_lambda(Fraction("5e-324"))


@pytest.mark.parametrize(
    "bad",
    [
        0,
        0.0,
        -1,
        -0.5,
        Fraction(-1, 3),
        True,
        False,
        "1",
        None,
        float("inf"),
        float("-inf"),
        float("nan"),
        1j,
    ],
)
def test_bad_epsilon_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="^epsilon: "):
        pcc_params(bad, 0.25, 100)


def test_tiny_epsilon_is_accepted_exactly() -> None:
    assert pcc_params(5e-324, 0.25, 100).epsilon == Fraction("5e-324")
    assert pcc_params(Fraction(1, 10**40), 0.25, 100).epsilon == Fraction(1, 10**40)
    assert pcc_params(np.float64(0.1), 0.25, 100).epsilon == Fraction(1, 10)


@pytest.mark.parametrize(
    "bad", [0, -1, -100, 2.0, 100.0, True, False, "100", None, np.int64(100), Fraction(100)]
)
def test_bad_window_is_refused_with_a_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match="^window: "):
        pcc_params(1, 0.25, bad)


def test_window_of_one_step_is_accepted() -> None:
    p = pcc_params(1, 0.5, 1)
    assert (p.window, p.w0, p.levels) == (1, 1, 3)


@pytest.mark.parametrize(("lam", "window"), [(0.25, 100), (Fraction(1, 1024), 5), (0.5, 7)])
def test_levels_outside_0_to_l_or_not_int_are_refused(lam: object, window: int) -> None:
    p = pcc_params(1, lam, window)
    ell = p.levels
    methods = (p.level_epsilon, p.level_lambda, p.level_beta, p.level_size, p.level_scale)
    for bad in (-1, -2, ell + 1, ell + 2, 10**6, 0.0, 1.0, float(ell), True, False, np.int64(0), "1", None):
        # an int out of range is echoed, any other value is named by its type only (check_int)
        shown = str(bad) if type(bad) is int else type(bad).__name__
        message = rf"^level: must be an int in 0\.\.{ell}, got {re.escape(shown)}$"
        for method in methods:
            with pytest.raises(ValueError, match=message):
                method(bad)  # type: ignore[arg-type]
    for i in range(ell + 1):  # 0 and ℓ themselves are levels
        assert [m(i) for m in methods] == [
            Fraction(1, 2 ** (ell - i + 1)),
            Fraction(1, 2**i * (ell + 1)),
            2 ** (i + 1) * (ell + 1),
            2**i * p.w0,
            (2 ** (i + 1) * (ell + 1) + 1) * 2 ** (ell - i + 1),
        ]


# ---- the blocks, their life cycle and the window cover -------------------------------------------

CASES = [
    (Fraction(1, 2), 1),
    (Fraction(1, 2), 2),
    (Fraction(1, 2), 7),
    (Fraction(1, 2), 16),
    (Fraction(1, 2), 17),
    (0.999, 10),
    (0.3, 37),
    (Fraction(1, 4), 9),
    (Fraction(1, 4), 50),
    (Fraction(1, 8), 100),
    (0.1, 61),
    (Fraction(1, 16), 64),
    (Fraction(1, 32), 45),
    (Fraction(1, 1024), 5),
]


def horizon(r: Ref) -> int:
    """Three windows and two top-level blocks (at most two windows' worth when ℓ is far larger
    than one window needs)."""
    return 3 * r.window + 2 * min(r.size(r.ell), 2 * r.window) + 3


def ref_blocks_containing(r: Ref, i: int, t: int) -> list[tuple[int, int]]:
    """Every (i, j) with (j−1)W_i+1 <= t <= jW_i, by scanning j."""
    return [(i, j) for j in range(1, t + 2) if r.start(i, j) <= t <= r.end(i, j)]


def ref_active_leaves(r: Ref, t: int) -> list[int]:
    return [j for j in range(1, t + 2) if r.end(0, j) <= t and r.start(0, j) >= t - r.window + 1]


def ref_cover(r: Ref, t: int) -> list[tuple[int, int]]:
    """Greedy dyadic cover, in time steps: from the first active step, repeatedly the highest level
    i <= ℓ that has a block starting exactly there and ending inside the active range."""
    leaves = ref_active_leaves(r, t)
    if not leaves:
        return []
    s, e = r.start(0, leaves[0]), r.end(0, leaves[-1])
    out = []
    while s <= e:
        best = None
        for i in range(r.ell + 1):
            for j in range(1, e // r.size(i) + 1):
                if r.start(i, j) == s and r.end(i, j) <= e:
                    best = (i, j)
        assert best is not None
        out.append(best)
        s = r.end(*best) + 1
    return out


def as_pairs(blocks: list[BlockId]) -> list[tuple[int, int]]:
    for b in blocks:
        assert type(b) is BlockId and type(b.level) is int and type(b.index) is int
    return [(b.level, b.index) for b in blocks]


@pytest.mark.parametrize(("lam", "window"), CASES)
def test_block_bounds_and_the_block_containing_t(lam: object, window: int) -> None:
    r = ref_params(1, lam, window)
    p = pcc_params(1, lam, window)
    for i in range(r.ell + 1):
        for j in range(1, 40):
            b = BlockId(i, j)
            assert (b.start(p), b.end(p)) == (r.start(i, j), r.end(i, j))
        for t in range(1, horizon(r)):
            b = block_containing(p, i, t)
            assert as_pairs([b]) == ref_blocks_containing(r, i, t)


@pytest.mark.parametrize(("lam", "window"), CASES)
def test_completed_blocks_are_those_ending_at_t(lam: object, window: int) -> None:
    r = ref_params(1, lam, window)
    p = pcc_params(1, lam, window)
    for t in range(1, horizon(r)):
        want = [(i, j) for i in range(r.ell + 1) for j in range(1, t + 1) if r.end(i, j) == t]
        assert as_pairs(completed_at(p, t)) == want
    top = r.size(r.ell)
    for t in (top - 1, top, top + 1, 2 * top):  # the top level completes exactly at multiples of W_ℓ
        assert ((r.ell, t // top) in as_pairs(completed_at(p, t))) == (t % top == 0)


@pytest.mark.parametrize(("lam", "window"), CASES)
def test_expiry_is_the_first_step_leaving_the_window(lam: object, window: int) -> None:
    r = ref_params(1, lam, window)
    p = pcc_params(1, lam, window)
    for i in range(r.ell + 1):
        for j in range(1, 12):
            first = r.start(i, j)
            # the window [t−W+1, t] loses the block's first step between t = first+W−1 and first+W
            for t in range(max(1, first + window - 3), first + window + 3):
                got = is_expired(p, BlockId(i, j), t)
                assert type(got) is bool
                assert got == (first < t - window + 1) == (t >= first + window)


@pytest.mark.parametrize(("lam", "window"), CASES)
def test_active_leaves_and_the_window_cover(lam: object, window: int) -> None:
    r = ref_params(1, lam, window)
    p = pcc_params(1, lam, window)
    for t in range(1, horizon(r)):
        leaves = active_leaves(p, t)
        assert type(leaves) is range and leaves.step == 1
        assert list(leaves) == ref_active_leaves(r, t)
        cover = window_cover(p, t)
        assert as_pairs(cover) == ref_cover(r, t), t
        for b in cover:  # every block of the cover is complete and unexpired at t
            assert b.end(p) <= t and not is_expired(p, b, t)
