"""The exact top-order-statistics sampler (privstream.mechanisms.order_statistics.TopNoiseLevels).

Written for the mutation run of issue 23 (``python benchmarks/mutation.py order_statistics``). The
slow statistical law tests of tests/test_mechanisms_domain_topk.py are not in that unit; these
tests are fast and fully deterministic (fixed seeds and scripted random words, no statistical
test, so no false-failure rate).

Each sample is checked against an independent high-precision computation (mpmath, 200 digits) of
the law the module documents, never against the module's own Decimal arithmetic:

* the random words a generator draws are recorded; V_i is known to lie in [u/2^b, (u+1)/2^b) for
  the bits u (b of them) it was given, and ln W_i lies between the sums of ln V_j/(N−j+1) (j ≤ i)
  over the ends of those intervals (W_1 = V_1^{1/N}, W_i = W_{i−1}·V_i^{1/(N−i+1)});
* the level must be Q(W_i) = min{z : W_i < F(z)}, F the discrete Laplace CDF derived here from its
  mass function Pr[Z = z] ∝ exp(−|z|/t) (and checked against a brute-force sum of that mass
  function), and it must be the same for every point of those intervals;
* the number of words is pinned: one 64-bit word per value when the 64-bit intervals already
  decide the level with room to spare (checked here), and when they do not (scripted words that
  put F(z) inside the interval: V = 0, V next to 1, V next to F(0), a W_3 whose interval holds a
  boundary), exactly one more 64-bit word for every value generated so far, in their order, per
  round, until the intervals separate.

Rigour where the rounding margins matter: for n ≥ 10^15 the 64-bit grid of ln W is finer than the
margins, so scripted words put ln W at 10^-31 .. 3·10^-30 (and 10^-51) from ln F(z), for the first,
second and 150th value, on both sides. The level must still be the independent one (a sampler
that narrows an interval by its margin, or drops it, answers wrongly there), and the number of
refinement rounds is the one the documented precision schedule gives (P = 40 digits, 20 more per
round, margins 10^(8−P) times the magnitudes involved; each pinned gap is at least 2.5x inside or
outside the margin, so only a margin changed by that much or more fails).

Also covered: n = 1, small n, n = 10^12 and 2^70, integer and fractional scales, positive, zero
and negative levels, non-increasing output of exact ``int`` s, StopIteration after n values (with no
further draw), n < 1, the ``generated`` count, the ln F cache being recomputed after a refinement
(a point 10^-35 from ln F(0) cannot be separated from an interval computed at the starting
precision: a stale cache keeps refining until the scripted words run out), the running sums being
recomputed (V_1 known only to 2^-20 of itself makes W_3's interval wide until V_1 is refined), and
the search: O(log |level|) comparisons, and for later values only comparisons below the previous
level (Q(W_i) ≤ Q(W_{i−1}) is known).

mpmath is in the test extra (pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import mpmath
import pytest

from privstream.mechanisms.order_statistics import TopNoiseLevels
from privstream.noise.rng import RandomSource, SeededRandomSource

# A mutant that makes the search loop without drawing fails here instead of at the runner's limit.
pytestmark = pytest.mark.timeout(30)

DPS = 200
WORD = 64
TWO64 = 2**WORD
# Comparisons "Q(W) <= z" allowed per test: the searches here make fewer than 600 per test.
PROBE_BUDGET = 5000


class Exhausted(Exception):
    """The scripted words (and the allowed number of draws) ran out."""


class Runaway(Exception):
    """More than PROBE_BUDGET comparisons in one test: the search does not end."""


@pytest.fixture(autouse=True)
def bounded_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every comparison counts against PROBE_BUDGET, so a search that never ends (no draws, so
    the scripted source cannot stop it) fails at once instead of at the timeout."""
    below = TopNoiseLevels._below
    calls = 0

    def counted(self: TopNoiseLevels, z: int) -> bool:
        nonlocal calls
        calls += 1
        if calls > PROBE_BUDGET:
            raise Runaway(f"more than {PROBE_BUDGET} comparisons")
        return below(self, z)

    monkeypatch.setattr(TopNoiseLevels, "_below", counted)


class ScriptedSource:
    """``randbits`` returns the scripted words in order, then words of ``then`` (if given); every
    draw is recorded as (bits asked, value). More than ``limit`` draws raise :class:`Exhausted`."""

    def __init__(self, words: Sequence[int] = (), then: RandomSource | None = None, limit: int = 64) -> None:
        self.words = list(words)
        self.then = then
        self.limit = limit
        self.drawn: list[tuple[int, int]] = []

    def randbits(self, n: int) -> int:
        if len(self.drawn) >= self.limit:
            raise Exhausted(f"more than {self.limit} draws")
        k = len(self.drawn)
        if k < len(self.words):
            value = self.words[k]
        elif self.then is not None:
            value = self.then.randbits(n)
        else:
            raise Exhausted(f"only {len(self.words)} scripted words")
        if not 0 <= value < 2**n:
            raise Exhausted(f"scripted word {value} does not fit in {n} bits")
        self.drawn.append((n, value))
        return value

    def randbelow(self, n: int) -> int:
        raise AssertionError("TopNoiseLevels draws whole words only")

    @property
    def values(self) -> list[int]:
        assert all(bits == WORD for bits, _ in self.drawn), self.drawn
        return [v for _, v in self.drawn]


# ---- the independent law (mpmath) ----------------------------------------------------------------


def _mp_scale(t: Fraction) -> mpmath.mpf:
    return mpmath.mpf(t.numerator) / t.denominator


def log_cdf(z: int, t: Fraction) -> mpmath.mpf:
    """ln F(z) for Pr[Z = k] = c·a^|k|, a = e^{-1/t}, c = (1−a)/(1+a) (so Σ_k Pr = 1):
    F(z) = c·a^{−z}/(1−a) = a^{|z|}/(1+a) for z < 0 (geometric tail), 1 − c·a^{z+1}/(1−a) for z ≥ 0."""
    with mpmath.workdps(DPS):
        a = mpmath.exp(-1 / _mp_scale(t))
        if z < 0:
            return mpmath.log(a ** (-z)) - mpmath.log1p(a)
        return mpmath.log1p(-(a ** (z + 1)) / (1 + a))


def quantile(ln_w: mpmath.mpf, t: Fraction) -> int:
    """Q(W) = min{z : W < F(z)} for the W with ln W = ``ln_w`` (< 0): a closed-form guess, then
    corrected by direct comparisons with ln F."""
    with mpmath.workdps(DPS):
        ts = _mp_scale(t)
        a = mpmath.exp(-1 / ts)
        if ln_w < log_cdf(-1, t):
            z = int(mpmath.floor(ts * (ln_w + mpmath.log1p(a)))) + 1
        else:
            z = int(mpmath.floor(-ts * mpmath.log((1 + a) * -mpmath.expm1(ln_w))))
        while ln_w < log_cdf(z - 1, t):
            z -= 1
        while not ln_w < log_cdf(z, t):
            z += 1
        return z


def ln_w_intervals(n: int, uniforms: Sequence[Sequence[int]]) -> list[tuple[mpmath.mpf, mpmath.mpf]]:
    """[lo, hi] of ln W_i, i = 1.., when V_i's bits are the 64-bit words ``uniforms[i-1]`` (first
    word most significant): ln W_i = Σ_{j ≤ i} ln V_j / (n − j + 1)."""
    out = []
    with mpmath.workdps(DPS):
        lo, hi = mpmath.mpf(0), mpmath.mpf(0)
        for i, words in enumerate(uniforms, start=1):
            u, b = 0, 0
            for w in words:
                u, b = (u << WORD) | w, b + WORD
            weight = n - i + 1
            lo = lo + (mpmath.log(mpmath.mpf(u) / 2**b) / weight if u else mpmath.ninf)
            hi = hi + mpmath.log(mpmath.mpf(u + 1) / 2**b) / weight
            out.append((lo, hi))
    return out


def decided_level(lo: mpmath.mpf, hi: mpmath.mpf, t: Fraction, words: int = 1, room: str = "") -> int | None:
    """Q(W) if it is the same for every ln W in [lo, hi] with room to both boundaries, else None.
    The room asked by default, 10^-24 for 64-bit words and 10^-20 less per further word, exceeds
    the module's margins at the precision it has reached by then (40 digits, 20 more per word)."""
    if lo == mpmath.ninf or hi >= 0:
        return None
    z = quantile(hi, t)
    if quantile(lo, t) != z:
        return None
    with mpmath.workdps(DPS):
        clear = mpmath.mpf(room) if room else mpmath.mpf(10) ** (-24 - 20 * (words - 1))
        if not (log_cdf(z - 1, t) + clear < lo and hi + clear < log_cdf(z, t)):
            return None
    return z


def expected_levels(n: int, t: Fraction, uniforms: Sequence[Sequence[int]], room: str = "") -> list[int]:
    """The levels the given bits decide (asserting that they do, with room to spare)."""
    out = []
    words = max(len(u) for u in uniforms)
    for i, (lo, hi) in enumerate(ln_w_intervals(n, uniforms)):
        z = decided_level(lo, hi, t, words, room)
        assert z is not None, f"test setup: W_{i + 1} is not decided by its bits"
        out.append(z)
    return out


def straddles(lo: mpmath.mpf, hi: mpmath.mpf, t: Fraction) -> bool:
    """[lo, hi] contains ln F(z) for some z (no sampler can decide Q(W) from these bits)."""
    return lo == mpmath.ninf or hi >= 0 or quantile(lo, t) != quantile(hi, t)


def generate(gen: TopNoiseLevels, count: int) -> list[int]:
    levels = []
    for i in range(count):
        level = gen.next()
        assert type(level) is int
        levels.append(level)
        assert gen.generated == i + 1
    return levels


def word_above(x: mpmath.mpf, bits: int) -> list[int]:
    """The 64-bit words of ⌊x·2^bits⌋ (bits a multiple of 64): the interval holding x."""
    with mpmath.workdps(DPS):
        u = int(mpmath.floor(x * mpmath.mpf(2) ** bits))
    return [(u >> (bits - WORD * (k + 1))) & (TWO64 - 1) for k in range(bits // WORD)]


# ---- the helper law itself -----------------------------------------------------------------------


@pytest.mark.parametrize("t", [Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_independent_cdf_is_the_discrete_laplace_cdf(t: Fraction) -> None:
    with mpmath.workdps(60):
        a = mpmath.exp(-1 / _mp_scale(t))
        mass = {k: a ** abs(k) for k in range(-3000, 3001)}
        total = mpmath.fsum(mass.values())
        for z in range(-6, 7):
            brute = mpmath.fsum(v for k, v in mass.items() if k <= z) / total
            assert abs(mpmath.log(brute) - log_cdf(z, t)) < mpmath.mpf("1e-50")
            # and the quantile inverts it
            inside = log_cdf(z, t) - mpmath.mpf("1e-30")
            assert quantile(inside, t) == z
            assert quantile(log_cdf(z - 1, t) + mpmath.mpf("1e-30"), t) == z


# ---- seeded generators: one word per value, levels = Q(W_i) -------------------------------------


LAW_CASES = [
    (2, Fraction(1, 3), 2, 11),
    (5, Fraction(5, 2), 5, 12),
    (7, Fraction(1), 7, 13),
    (40, Fraction(3, 7), 9, 14),
    (10**6, Fraction(20), 8, 15),
    (10**12, Fraction(1), 6, 16),
    (10**12, Fraction(7, 3), 5, 17),
    (2**70, Fraction(3, 4), 4, 18),
]


@pytest.mark.parametrize(("n", "t", "count", "seed"), LAW_CASES)
def test_levels_are_the_quantiles_of_the_top_uniforms(n: int, t: Fraction, count: int, seed: int) -> None:
    rng = ScriptedSource(then=SeededRandomSource(seed))
    gen = TopNoiseLevels(n, t, rng)
    assert gen.generated == 0
    levels = generate(gen, count)
    words = rng.values
    assert len(words) == count  # one 64-bit word per value: every level decided by its first word
    assert levels == expected_levels(n, t, [[w] for w in words])
    assert levels == sorted(levels, reverse=True)


def test_single_values_cover_negative_zero_and_positive_levels() -> None:
    t = Fraction(1)
    seen = []
    for seed in range(12):
        rng = ScriptedSource(then=SeededRandomSource(100 + seed))
        gen = TopNoiseLevels(1, t, rng)
        level = gen.next()
        assert type(level) is int
        assert rng.values and len(rng.values) == 1
        assert [level] == expected_levels(1, t, [rng.values])
        seen.append(level)
        with pytest.raises(StopIteration):
            gen.next()
        assert gen.generated == 1 and len(rng.drawn) == 1
    assert min(seen) < 0 < max(seen) and 0 in seen


@pytest.mark.parametrize(
    ("t", "word"),
    [
        (Fraction(1), 2**63),  # V = 1/2: level 0
        (Fraction(1), 2**62),  # V = 1/4: level -1 (F(-1) ≈ 0.269)
        (Fraction(1), 3 * 2**62),  # V = 3/4: level 1
        (Fraction(1, 3), 1),  # V ∈ [2^-64, 2^-63): level -14, decided without V's lower end = 0
        (Fraction(1), 3),  # level -43
        (Fraction(7, 2), 5 * 2**58),
        (Fraction(1, 2), TWO64 - 2**20),  # close to 1: level 7
        (Fraction(9, 4), TWO64 - 2**40),
    ],
)
def test_scripted_single_word_levels(t: Fraction, word: int) -> None:
    rng = ScriptedSource([word])
    gen = TopNoiseLevels(1, t, rng)
    assert [gen.next()] == expected_levels(1, t, [[word]])
    assert rng.values == [word]


def test_pinned_levels_of_simple_words() -> None:
    """A few levels written out (they are also computed by ``expected_levels`` above)."""
    cases = [(Fraction(1), 2**63, 0), (Fraction(1), 2**62, -1), (Fraction(1), 3 * 2**62, 1)]
    cases += [(Fraction(1, 3), 1, -14)]
    for t, word, level in cases:
        assert TopNoiseLevels(1, t, ScriptedSource([word])).next() == level


def test_scripted_descending_sequence_small_n() -> None:
    """n = 4: W_1 = V_1^{1/4}, W_2 = W_1·V_2^{1/3}, ...; words chosen to give repeated and falling levels."""
    n, t = 4, Fraction(1, 2)
    words = [TWO64 // 2, TWO64 - 2**50, TWO64 // 8, 3 * TWO64 // 4]
    rng = ScriptedSource(words)
    gen = TopNoiseLevels(n, t, rng)
    levels = generate(gen, n)
    assert levels == expected_levels(n, t, [[w] for w in words])
    assert rng.values == words
    assert len(set(levels)) < n  # a repeated level (V_2 close to 1)
    with pytest.raises(StopIteration):
        gen.next()
    assert gen.generated == n and len(rng.drawn) == n


# ---- construction, exhaustion -----------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, -(10**12)])
def test_n_below_one_is_refused(n: int) -> None:
    rng = ScriptedSource([1, 2, 3])
    with pytest.raises(ValueError, match="n must be >= 1"):
        TopNoiseLevels(n, Fraction(1), rng)
    assert rng.drawn == []


def test_n_one_gives_one_value_then_stops() -> None:
    rng = ScriptedSource([2**63, 2**63, 2**63])
    gen = TopNoiseLevels(1, Fraction(1), rng)
    assert gen.generated == 0 and rng.drawn == []  # nothing drawn before the first value
    assert gen.next() == 0
    for _ in range(2):
        with pytest.raises(StopIteration, match="^all N values generated$"):
            gen.next()
    assert gen.generated == 1
    assert len(rng.drawn) == 1


def test_stop_after_n_values_small_n() -> None:
    rng = ScriptedSource(then=SeededRandomSource(7))
    gen = TopNoiseLevels(3, Fraction(2), rng)
    generate(gen, 3)
    with pytest.raises(StopIteration, match="^all N values generated$"):
        gen.next()
    assert gen.generated == 3 and len(rng.drawn) == 3


# ---- refinement: intervals that hold a boundary -------------------------------------------------


def _f0(t: Fraction) -> mpmath.mpf:
    with mpmath.workdps(DPS):
        return mpmath.exp(log_cdf(0, t))


@pytest.mark.parametrize("side", [-1, 1])
def test_first_word_straddling_f0_draws_one_more_word(side: int) -> None:
    """V's first word holds F(0) (t = 1, n = 1): a second word is needed and decides the side."""
    t = Fraction(1)
    first, second = word_above(_f0(t), 128)
    lo, hi = ln_w_intervals(1, [[first]])[0]
    assert straddles(lo, hi, t)
    second = second + side * 2**40  # 2^-88 from F(0), on the chosen side
    rng = ScriptedSource([first, second])
    level = TopNoiseLevels(1, t, rng).next()
    assert rng.values == [first, second]
    assert [level] == expected_levels(1, t, [[first, second]])
    assert level == (1 if side > 0 else 0)


@pytest.mark.parametrize("side", [-1, 1])
def test_two_refinements(side: int) -> None:
    """The first 128 bits of V hold F(0) too: three words."""
    t = Fraction(5, 3)
    w1, w2, w3 = word_above(_f0(t), 192)
    for k in (1, 2):
        assert straddles(*ln_w_intervals(1, [[w1, w2][:k]])[0], t)
    w3 = w3 + side * 2**50
    rng = ScriptedSource([w1, w2, w3])
    level = TopNoiseLevels(1, t, rng).next()
    assert rng.values == [w1, w2, w3]
    assert [level] == expected_levels(1, t, [[w1, w2, w3]])
    assert level == (1 if side > 0 else 0)


@pytest.mark.parametrize("side", [-1, 1])
def test_near_miss_words_need_no_refinement(side: int) -> None:
    """The word just below (above) the one holding F(0): decided at once, level 0 (1)."""
    t = Fraction(1)
    (u,) = word_above(_f0(t), 64)
    word = u + side
    rng = ScriptedSource([word])
    assert TopNoiseLevels(1, t, rng).next() == (1 if side > 0 else 0)
    assert rng.values == [word]
    assert expected_levels(1, t, [[word]]) == [1 if side > 0 else 0]


def test_ln_f_cache_is_recomputed_after_refinement() -> None:
    """ln V = ln F(0) + 10^-35 (n = 1): 128 bits separate the two, but only with ln F(0) known to
    better than 10^-35; an interval for it from the starting precision (40 digits) cannot."""
    t = Fraction(1)
    with mpmath.workdps(DPS):
        target = mpmath.exp(log_cdf(0, t) + mpmath.mpf("1e-35"))
    words = word_above(target, 128)
    rng = ScriptedSource(words, limit=12)
    assert TopNoiseLevels(1, t, rng).next() == 1
    assert rng.values == words
    assert expected_levels(1, t, [words]) == [1]
    with mpmath.workdps(DPS):
        target = mpmath.exp(log_cdf(0, t) - mpmath.mpf("1e-35"))
    words = word_above(target, 128)
    rng = ScriptedSource(words, limit=12)
    assert TopNoiseLevels(1, t, rng).next() == 0
    assert rng.values == words


@pytest.mark.parametrize("zeros", [1, 2])
def test_zero_words_leave_no_lower_bound(zeros: int) -> None:
    """V ∈ [0, 2^-64b): ln V has no lower end, so the level (unbounded below) needs more words."""
    t = Fraction(1, 3)
    words = [0] * zeros + [2**63 + 12345]
    rng = ScriptedSource(words)
    level = TopNoiseLevels(1, t, rng).next()
    assert rng.values == words
    assert [level] == expected_levels(1, t, [words])
    assert level < -14 * zeros  # ln V < -44·zeros, Pr[Z = z] ∝ e^{3z} below 0


@pytest.mark.parametrize(
    ("t", "second"), [(Fraction(1), 0), (Fraction(1), 2**63), (Fraction(3, 2), TWO64 - 2**32)]
)
def test_all_ones_word_has_no_upper_bound(t: Fraction, second: int) -> None:
    """V ∈ [1 − 2^-64, 1): W may be as close to 1 as we like (any level above), so a second word."""
    words = [TWO64 - 1, second]
    rng = ScriptedSource(words)
    level = TopNoiseLevels(1, t, rng).next()
    assert rng.values == words
    assert [level] == expected_levels(1, t, [words])
    assert level > 40


def _third_straddles(n: int, t: Fraction, w1: int, w2: int, below: int) -> tuple[list[int], int]:
    """Levels of W_1, W_2 from (w1, w2), and a word w3 whose 64-bit W_3 interval holds
    ln F(level_2 − below)."""
    l1, l2 = expected_levels(n, t, [[w1], [w2]])
    lo2, hi2 = ln_w_intervals(n, [[w1], [w2]])[1]
    with mpmath.workdps(DPS):
        mid = (lo2 + hi2) / 2
        v3 = mpmath.exp((n - 2) * (log_cdf(l2 - below, t) - mid))
    (w3,) = word_above(v3, 64)
    assert straddles(*ln_w_intervals(n, [[w1], [w2], [w3]])[2], t)
    return [l1, l2], w3


SIXTEENTH = TWO64 // 16 + 987654321


@pytest.mark.parametrize(
    ("n", "t", "below", "w1"),
    [
        (5, Fraction(1, 2), 1, SIXTEENTH),
        (5, Fraction(1, 2), 2, SIXTEENTH),
        (4, Fraction(2), 2, SIXTEENTH),
        (10**12, Fraction(4, 3), 1, SIXTEENTH),
        # V_1 ≈ 2^-44 known to 2^-20 of itself: W_3's 64-bit interval is wide because of V_1 alone,
        # so W_3 is only decided once the sum over V_1, V_2 is recomputed from their refined bits.
        (5, Fraction(1, 2), 1, 2**20 + 12345),
        (6, Fraction(3), 1, 2**30 + 7),
    ],
)
def test_refinement_refines_every_earlier_uniform(n: int, t: Fraction, below: int, w1: int) -> None:
    """W_3's interval holds a boundary: one more word for V_1, V_2, V_3 in that order, the running
    sums are recomputed from the refined V_1, V_2, and the later values use the refined bits."""
    w2 = 3 * (TWO64 // 5)
    first, w3 = _third_straddles(n, t, w1, w2, below)
    refine = [0x0123456789ABCDEF, 0xFEDCBA9876543210, 0x8000000000000000 + 0x1F]
    count = min(n, 5)
    tail = SeededRandomSource(99)
    later = [tail.randbits(64) for _ in range(count - 3)]
    rng = ScriptedSource([w1, w2, w3, *refine, *later])
    gen = TopNoiseLevels(n, t, rng)
    levels = generate(gen, count)
    assert rng.values == [w1, w2, w3, *refine, *later]
    uniforms = [[w1, refine[0]], [w2, refine[1]], [w3, refine[2]], *[[w] for w in later]]
    assert levels[:2] == first
    assert levels == expected_levels(n, t, uniforms)
    assert levels == sorted(levels, reverse=True)


def test_huge_n_straddle() -> None:
    """n = 10^12: the 64-bit interval of W_1 = V_1^{1/n} holds ln F(z) for the z near which W_1 lies."""
    n, t = 10**12, Fraction(1)
    z = 26
    with mpmath.workdps(DPS):
        v = mpmath.exp(n * log_cdf(z, t))
    words = word_above(v, 128)
    words[1] ^= 1 << 40
    assert straddles(*ln_w_intervals(n, [words[:1]])[0], t)
    rng = ScriptedSource(words)
    gen = TopNoiseLevels(n, t, rng)
    assert [gen.next()] == expected_levels(n, t, [words])
    assert rng.values == words


# ---- rigour near a boundary: huge n, where the rounding margins matter -------------------------
#
# For n ≥ 10^15 the 64-bit grid of ln W_1 = ln V_1/n is finer than 10^-33, so ln W can be put at a
# chosen distance from ln F(z). The module's margins at P digits are 10^(8−P)·(1 + Σ|terms|)·(k+1)
# on ln W_k and 10^(8−P)·(2 + |ln F(z)| + |z/t|) on ln F(z), with P = 40 at the start and 20 more per
# refinement round; near the level of W_1 (z/t ≈ ln n ≈ 35..41) that is ≈ 4·10^-31 at 40 digits,
# ≈ 4·10^-51 at 60. The tests put gaps well inside or well outside (≥ 2.5x) these and check the
# level (the independent value: any rigorous sampler must give it) and the number of words.


def _ln_v_words(n: int, ln_w: mpmath.mpf, bits: int = 192) -> list[int]:
    """The first ``bits`` bits of V with ln V/n = ``ln_w`` (to 10^-70 for n ≥ 10^15)."""
    with mpmath.workdps(DPS):
        return word_above(mpmath.exp(n * ln_w), bits)


@pytest.mark.parametrize("side", [-1, 1])
@pytest.mark.parametrize(
    ("gap", "words"),
    [("1e-31", 2), ("3e-30", 1), ("1e-51", 3)],  # inside the 40-digit margin / outside / inside at 60
)
@pytest.mark.parametrize(
    ("n", "t"), [(10**15, Fraction(1)), (10**18, Fraction(5, 2)), (10**16, Fraction(2, 7))]
)
def test_first_value_just_off_a_boundary(side: int, gap: str, words: int, n: int, t: Fraction) -> None:
    """ln W_1 = ln F(z) ± gap: the level is z (below) or z + 1 (above), as the independent value
    says; a gap inside the margins at 40 digits takes one refinement round, one outside none, one
    inside the margins at 60 digits two."""
    with mpmath.workdps(DPS):
        z = quantile(mpmath.mpf(-1) / n, t)
        script = _ln_v_words(n, log_cdf(z, t) + side * mpmath.mpf(gap))
    rng = ScriptedSource(script)
    level = TopNoiseLevels(n, t, rng).next()
    assert rng.values == script[:words]
    assert [level] == expected_levels(n, t, [script])
    assert level == (z + 1 if side > 0 else z)


@pytest.mark.parametrize("side", [-1, 1])
@pytest.mark.parametrize(("n", "t"), [(10**15, Fraction(1)), (10**17, Fraction(4, 3))])
def test_second_value_just_off_a_boundary(side: int, n: int, t: Fraction) -> None:
    """W_2 = W_1·V_2^{1/(n−1)} with ln W_2 = ln F(level_1 − 1) ± 10^-31: one refinement round
    (a word for V_1, then one for V_2)."""
    w1, r1 = 2**63 + 2**40, 2**63
    (l1,) = expected_levels(n, t, [[w1]])
    lo, hi = ln_w_intervals(n, [[w1, r1]])[0]
    with mpmath.workdps(DPS):
        target = log_cdf(l1 - 1, t) + side * mpmath.mpf("1e-31")
        v2 = word_above(mpmath.exp((n - 1) * (target - (lo + hi) / 2)), 128)
    script = [w1, v2[0], r1, v2[1]]
    rng = ScriptedSource(script)
    gen = TopNoiseLevels(n, t, rng)
    levels = generate(gen, 2)
    assert rng.values == script
    assert levels == expected_levels(n, t, [[w1, r1], v2])
    assert levels == [l1, l1 if side > 0 else l1 - 1]


@pytest.mark.parametrize("side", [-1, 1])
@pytest.mark.parametrize(("gap", "rounds"), [("7e-31", 1), ("2.6e-30", 0)])
def test_late_value_just_off_a_boundary(side: int, gap: str, rounds: int) -> None:
    """The 150th value of n = 10^15 (t = 1) at ln F(z − 1) ± gap, z the level of the first 149
    (V_2..V_149 ≈ 1 − 2^-32). The margin on ln W_150 (≈ 151·10^-32) is then larger than the one
    on ln F (≈ 37·10^-32): a gap of 7·10^-31 is inside their sum (one round: a word for each of
    the 150 values) though outside their difference, so a sampler that narrowed ln W's interval
    by its margin instead of widening it gives the wrong level; 2.6·10^-30 is outside (no round)."""
    n, t, k = 10**15, Fraction(1), 150
    with mpmath.workdps(DPS):
        z = quantile(mpmath.mpf(-1) / n, t)
        (w1,) = word_above(mpmath.exp(n * log_cdf(z - 1, t) + mpmath.mpf("0.5")), 64)
    first = [w1] + [TWO64 - 2**32 - 977 * j for j in range(k - 2)]
    refine = [(0x9E3779B97F4A7C15 * (j + 1)) % TWO64 for j in range(k - 1)]
    assert expected_levels(n, t, [[w] for w in first]) == [z] * (k - 1)
    lo, hi = ln_w_intervals(n, [[w] for w in first])[-1]
    with mpmath.workdps(DPS):
        target = log_cdf(z - 1, t) + side * mpmath.mpf(gap)
        last = word_above(mpmath.exp((n - k + 1) * (target - (lo + hi) / 2)), 128)
    script = [*first, last[0], *refine, last[1]] if rounds else [*first, last[0]]
    rng = ScriptedSource(script, limit=2 * k + 2)
    levels = generate(TopNoiseLevels(n, t, rng), k)
    assert rng.values == script
    if rounds:
        uniforms = [[w, r] for w, r in zip(first, refine, strict=True)] + [last]
    else:
        uniforms = [[w] for w in first] + [last[:1]]
    assert levels == expected_levels(n, t, uniforms, room="1e-32")
    assert levels == [z] * (k - 1) + [z if side > 0 else z - 1]


# ---- the search: logarithmic, and using the previous level as its upper bound ---------------------


def record_probes(gen: TopNoiseLevels) -> list[list[int]]:
    """Records the z of every comparison "Q(W_i) <= z" (``_below``) the generator makes; the
    caller opens a new list before each ``next()``."""
    probes: list[list[int]] = []
    below = gen._below

    def recording(z: int) -> bool:
        probes[-1].append(z)
        return below(z)

    gen.__dict__["_below"] = recording
    return probes


@pytest.mark.parametrize(
    ("n", "t", "count", "seed"),
    [
        (10**12, Fraction(1000), 6, 31),
        (1, Fraction(1000), 1, 32),
        (30, Fraction(400), 30, 33),
        (10**9, Fraction(1, 5), 8, 34),
    ],
)
def test_search_is_logarithmic_and_starts_at_the_previous_level(
    n: int, t: Fraction, count: int, seed: int
) -> None:
    """Q(W_1) by galloping from 0 then bisecting: O(log |level|) comparisons (levels here reach
    ±27000); Q(W_i), i ≥ 2, from the known bound Q(W_i) ≤ Q(W_{i−1}): every comparison is below
    the previous level, O(log of the drop) of them."""
    rng = ScriptedSource(then=SeededRandomSource(seed), limit=count)
    gen = TopNoiseLevels(n, t, rng)
    probes = record_probes(gen)
    levels = []
    for _ in range(count):
        probes.append([])
        levels.append(gen.next())
    assert levels == expected_levels(n, t, [[w] for w in rng.values])
    assert len(probes[0]) <= 3 * abs(levels[0]).bit_length() + 4
    for i in range(1, count):
        drop = levels[i - 1] - levels[i]
        assert max(probes[i]) < levels[i - 1]
        assert len(probes[i]) <= 2 * drop.bit_length() + 2
    assert max(abs(x) for x in levels) > 1000 or t < 1
