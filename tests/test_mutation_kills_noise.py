"""The exact noise samplers (privstream.noise: CKS 2020 Alg. 1–3) and their random sources, on the
paths the distribution tests cannot tell apart.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py noise``). Every test is
deterministic (fixed seeds, scripted or recording sources that pin which draws are made), except
the CryptoRandomSource checks, whose false-failure rates are stated (all below 10^-17):

* an injected source is the one used (a recording source sees every draw, and the result equals
  the kernel's on a fresh copy of the seed), never the CSPRNG behind ``resolve(None)``;
* bad parameters are named at the start of the message (``"scale must be > 0"``);
* the path switches: fewer than SMALL_ARRAY draws use the scalar kernels, SMALL_ARRAY and more the
  vectorised ones; t = ⌊σ⌋ + 1 == max_t is still vectorised; the caller's Limits reach the
  vectorised samplers; fast_path's bounds; the int64 overflow guard of Alg. 2 at its exact bound
  (scripted per-lane draws);
* the Gaussian acceptance table: its size 64·t + 64 (|Y| at or beyond it goes to the exact scalar
  test), its exact fraction bits (⌊frac(γ)·2^bits⌋ by integer division even where a float quotient
  rounds up to the next integer), and its cache (each |Y| computed once per table);
* the acceptance test's flat pool of Bernoulli(exp(-1)) trials cut into per-lane segments, and its
  scalar hand-overs, replayed exactly from the seeded stream for lanes with integer γ;
* the random words: SeededRandomSource's stream written out from its definition (SHAKE-256 of
  seed || counter), _Draws' refill sizes and byte order, the word width per bound, and exact
  uniformity of below/bernoulli by feeding every word value once (a scripted source);
* V of Alg. 2 as the success runs of one flat trial sequence across batches (scripted trials);
* CryptoRandomSource's ranges and edge cases, KeyedRandomSource's key check;
* the seeded bit -> sample mapping of whole arrays, pinned by digest (a keyed source must replay
  an epoch's noise identically after a restore), with the counts of scalar hand-overs.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from fractions import Fraction
from math import isqrt

import numpy as np
import pytest

from privstream.noise import (
    CryptoRandomSource,
    SeededRandomSource,
    bernoulli,
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_array,
    discrete_laplace,
    discrete_laplace_array,
)
from privstream.noise.bernoulli import _bernoulli_exp
from privstream.noise.discrete import (
    SMALL_ARRAY,
    _discrete_gaussian,
    _discrete_laplace,
    _gaussian_array,
    _laplace_array,
)
from privstream.noise.rng import KeyedRandomSource, new_noise_key
from privstream.noise.vectorised import (
    DEFAULT_LIMITS,
    Limits,
    _accept,
    _Draws,
    _GammaTable,
    _laplace_candidates,
    fast_path,
    gaussian_array,
    laplace_array,
)


class Recording:
    """A SeededRandomSource that records every call (name, argument)."""

    def __init__(self, seed: int) -> None:
        self.inner = SeededRandomSource(seed)
        self.calls: list[tuple[str, int]] = []

    def randbits(self, n: int) -> int:
        self.calls.append(("randbits", n))
        return self.inner.randbits(n)

    def randbelow(self, n: int) -> int:
        self.calls.append(("randbelow", n))
        return self.inner.randbelow(n)


# ---- the injected source is used -------------------------------------------------------------------


def test_bernoulli_uses_the_given_source() -> None:
    for seed in range(8):
        rng = Recording(seed)
        got = bernoulli(Fraction(1, 3), rng)
        assert rng.calls == [("randbelow", 3)]
        assert got == (SeededRandomSource(seed).randbelow(3) < 1)


def test_bernoulli_exp_uses_the_given_source() -> None:
    for seed in range(8):
        rng = Recording(seed)
        got = bernoulli_exp(Fraction(5, 2), rng)
        assert rng.calls and all(name == "randbelow" for name, _ in rng.calls)
        assert got == _bernoulli_exp(5, 2, SeededRandomSource(seed))


def test_scalar_samplers_use_the_given_source() -> None:
    for seed in range(6):
        rng = Recording(seed)
        assert discrete_laplace(Fraction(7, 3), rng) == _discrete_laplace(7, 3, SeededRandomSource(seed))
        assert rng.calls
        rng = Recording(seed)
        assert discrete_gaussian(Fraction(9, 2), rng) == _discrete_gaussian(9, 2, SeededRandomSource(seed))
        assert rng.calls


# ---- messages name the parameter -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "start"),
    [
        (lambda: bernoulli(True), TypeError, "p must be a number"),  # type: ignore[arg-type]
        (lambda: bernoulli([1]), TypeError, "p must be a Fraction"),  # type: ignore[arg-type]
        (lambda: bernoulli_exp(True), TypeError, "gamma must be a number"),  # type: ignore[arg-type]
        (lambda: bernoulli_exp([1]), TypeError, "gamma must be a Fraction"),  # type: ignore[arg-type]
        (lambda: discrete_laplace(0), ValueError, "scale must be > 0"),
        (lambda: discrete_laplace(float("inf")), ValueError, "scale must be finite"),
        (lambda: discrete_gaussian(Fraction(-1, 2)), ValueError, "sigma2 must be > 0"),
        (lambda: discrete_laplace_array(-3, 20), ValueError, "scale must be > 0"),
        (lambda: discrete_gaussian_array(0, 20), ValueError, "sigma2 must be > 0"),
        (lambda: discrete_gaussian_array(float("nan"), 20), ValueError, "sigma2 must be finite"),
    ],
)
def test_messages_start_with_the_parameter_name(call, error: type[Exception], start: str) -> None:  # noqa: ANN001
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(start)


# ---- path switches and limits ----------------------------------------------------------------------


def test_small_array_boundary() -> None:
    """Fewer than SMALL_ARRAY draws: the scalar kernel per draw; SMALL_ARRAY draws: vectorised
    (the same seeded stream gives the respective path's values, and the two differ here)."""
    scale, sigma2 = Fraction(7, 3), Fraction(37, 5)
    for seed in (3, 4):
        below = SMALL_ARRAY - 1
        rng = SeededRandomSource(seed)
        assert discrete_laplace_array(scale, below, SeededRandomSource(seed)).tolist() == [
            _discrete_laplace(7, 3, rng) for _ in range(below)
        ]
        rng = SeededRandomSource(seed)
        assert discrete_gaussian_array(sigma2, below, SeededRandomSource(seed)).tolist() == [
            _discrete_gaussian(37, 5, rng) for _ in range(below)
        ]

        vec = laplace_array(7, 3, SMALL_ARRAY, SeededRandomSource(seed))
        assert np.array_equal(discrete_laplace_array(scale, SMALL_ARRAY, SeededRandomSource(seed)), vec)
        rng = SeededRandomSource(seed)
        assert vec.tolist() != [_discrete_laplace(7, 3, rng) for _ in range(SMALL_ARRAY)]

        vec = gaussian_array(37, 5, SMALL_ARRAY, SeededRandomSource(seed))
        assert np.array_equal(discrete_gaussian_array(sigma2, SMALL_ARRAY, SeededRandomSource(seed)), vec)
        rng = SeededRandomSource(seed)
        assert vec.tolist() != [_discrete_gaussian(37, 5, rng) for _ in range(SMALL_ARRAY)]


def test_gaussian_fast_path_at_max_t() -> None:
    """t = ⌊σ⌋ + 1 = 3 for σ² = 37/5: vectorised for max_t = 3, scalar kernels for max_t = 2."""
    n = 30
    assert isqrt(37 // 5) + 1 == 3
    at = _gaussian_array(Fraction(37, 5), n, SeededRandomSource(11), Limits(max_t=3))
    assert np.array_equal(at, gaussian_array(37, 5, n, SeededRandomSource(11), Limits(max_t=3)))
    below = _gaussian_array(Fraction(37, 5), n, SeededRandomSource(11), Limits(max_t=2))
    rng = SeededRandomSource(11)
    assert below.tolist() == [_discrete_gaussian(37, 5, rng) for _ in range(n)]
    assert not np.array_equal(at, below)


def test_laplace_fast_path_at_max_t() -> None:
    n = 30
    at = _laplace_array(Fraction(7, 3), n, SeededRandomSource(12), Limits(max_t=7))
    assert np.array_equal(at, laplace_array(7, 3, n, SeededRandomSource(12), Limits(max_t=7)))
    below = _laplace_array(Fraction(7, 3), n, SeededRandomSource(12), Limits(max_t=6))
    rng = SeededRandomSource(12)
    assert below.tolist() == [_discrete_laplace(7, 3, rng) for _ in range(n)]


LOW = Limits(word_bound=2, compare_bits=8)  # most bounds drawn by randbelow, short comparisons


def test_array_helpers_pass_their_limits_on() -> None:
    n = 40
    gauss = _gaussian_array(Fraction(37, 5), n, SeededRandomSource(13), LOW)
    assert np.array_equal(gauss, gaussian_array(37, 5, n, SeededRandomSource(13), LOW))
    assert not np.array_equal(gauss, gaussian_array(37, 5, n, SeededRandomSource(13)))
    lap = _laplace_array(Fraction(7, 3), n, SeededRandomSource(14), LOW)
    assert np.array_equal(lap, laplace_array(7, 3, n, SeededRandomSource(14), LOW))
    assert not np.array_equal(lap, laplace_array(7, 3, n, SeededRandomSource(14)))


def test_fast_path_bounds() -> None:
    assert fast_path(1, 1) and fast_path(2**24, 2**62) and fast_path(7, 3, Limits(max_t=7))
    assert not fast_path(0, 1) and not fast_path(2**24 + 1, 1) and not fast_path(1, 2**62 + 1)
    assert not fast_path(1, 0) and not fast_path(8, 3, Limits(max_t=7))
    out = laplace_array(3, 2**62, 20, SeededRandomSource(1))  # s = 2**62 is still vectorised
    assert out.tolist() == [0] * 20  # |Z| < (3 + 3·V)/2**62: 0 unless V >= 2**60


class FakeDraws:
    """Scripted per-lane draws for _laplace_candidates: U, D, V and B as given."""

    def __init__(self, u: list[int], v: list[int], negative: list[bool]) -> None:
        self.u, self.v, self.negative = u, v, negative

    def below(self, bound: int, count: int) -> np.ndarray:
        assert count == len(self.u) and all(x < bound for x in self.u)
        return np.array(self.u, dtype=np.int64)

    def bernoulli_exp_ratio(self, num: np.ndarray, den: int) -> np.ndarray:
        return np.ones(num.size, dtype=bool)

    def geometric(self, count: int) -> np.ndarray:
        assert count == len(self.v)
        return np.array(self.v, dtype=np.int64)

    def bits(self, count: int) -> np.ndarray:
        return np.array(self.negative[:count], dtype=bool)


@pytest.mark.parametrize("t", [1, 3, 2**24])
def test_laplace_overflow_guard_boundary(t: int) -> None:
    """Y = U + t·V must stay below 2**62: V = ⌊(2**62 − t)/t⌋ is the largest V accepted (exact
    integer bound; for t = 1 it is 2**62 − 1, which a float quotient rounds up to 2**62)."""
    top = (2**62 - t) // t
    u = [t - 1, 0]
    y = _laplace_candidates(FakeDraws(u, [top, 0], [False, True]), t, 1, 2)
    assert y.tolist() == [t - 1 + t * top]  # (B = 1, Y = 0) rejected
    with pytest.raises(OverflowError, match="does not fit in int64"):
        _laplace_candidates(FakeDraws(u, [top + 1, 0], [False, False]), t, 1, 2)


def test_laplace_array_checks_its_own_limits() -> None:
    with pytest.raises(ValueError, match="outside the vectorised path"):
        laplace_array(7, 3, 10, SeededRandomSource(1), Limits(max_t=6))
    with pytest.raises(ValueError, match="outside the vectorised path"):
        gaussian_array(37, 5, 10, SeededRandomSource(1), Limits(max_t=2))


# ---- the Gaussian acceptance table -----------------------------------------------------------------


def _exact(table: _GammaTable, a: int) -> tuple[int, int]:
    """(⌊γ(a)⌋ capped at whole_trials + 1, ⌊frac(γ(a))·2^bits⌋) from the formula, in Fractions."""
    gamma = Fraction((a * table.t * DEN - NUM) ** 2, 2 * NUM * DEN * table.t**2)
    whole = gamma.numerator // gamma.denominator
    frac = gamma - whole
    return min(whole, 16 + 1), (frac * 2**16).numerator // (frac * 2**16).denominator


NUM, DEN = 37, 5  # σ² = 37/5, t = 3


def test_table_size_is_64t_plus_64() -> None:
    """|Y| >= 64·t + 64 = 256 goes to the exact scalar test (counted), |Y| = 255 stays in the table
    (and fails its first of 16 vectorised Bernoulli(exp(-1)) trials for this seed, γ(255) ≈ 4300)."""
    table = _GammaTable(NUM, DEN, 16, 16, 2**20)
    assert table.t == 3
    for y, beyond in (([255, -255], 0), ([256, 255], 1), ([-256, 257, 255, 900], 3), ([191, 192, 193], 0)):
        draws = _Draws(SeededRandomSource(21), DEFAULT_LIMITS, None)
        out = _accept(draws, table, np.array(y, dtype=np.int64))
        assert draws.stats["scalar_accept_lanes"] == beyond, y
        assert not out.any()
    small = _GammaTable(NUM, DEN, 16, 16, 10)  # table_size below 64·t + 64: that bound
    draws = _Draws(SeededRandomSource(21), DEFAULT_LIMITS, None)
    _accept(draws, small, np.array([9, 10], dtype=np.int64))
    assert draws.stats["scalar_accept_lanes"] == 1
    _accept(draws, table, np.array([256, 300], dtype=np.int64))  # the counts of one call add up
    assert draws.stats["scalar_accept_lanes"] == 3


def test_accept_without_table_lanes_draws_no_trials() -> None:
    """No lane in the table (none at all, or all beyond it): no Bernoulli(exp(-1)) trial is drawn
    (no word refill); lanes beyond the table use the scalar kernel's randbelow only."""
    table = _GammaTable(NUM, DEN, 16, 16, 2**20)
    for y in ([], [256, -300, 1000]):
        rng = Recording(41)
        draws = _Draws(rng, DEFAULT_LIMITS, None)
        out = _accept(draws, table, np.array(y, dtype=np.int64))
        assert out.tolist() == [False] * len(y)
        assert all(name == "randbelow" for name, _ in rng.calls) and len(rng.calls) >= len(y)
        assert draws.stats["scalar_accept_lanes"] == len(y)


def _replay_accept(seed: int, y: list[int], whole_trials: int) -> tuple[list[bool], int]:
    """The acceptance of lanes with integer γ(a) = (2a − 2)²/16 (σ² = 2, t = 2, so 2·N·D·t² = 16;
    fraction 0: Bernoulli(exp(-0)) = 1 and the fraction test's draws come last), replayed from the
    seeded stream, with the number of scalar hand-overs: first the lanes beyond the table
    (|Y| >= 192) in lane order, each the scalar Bernoulli(exp(-γ)); then one flat pool of
    min(⌊γ⌋, whole_trials) Bernoulli(exp(-1)) trials per table lane in lane order, a lane passing
    iff its segment holds no failure; then, in lane order, the passed lanes with ⌊γ⌋ > whole_trials
    finish with the scalar Bernoulli(exp(-(γ − whole_trials)))."""
    draws = _Draws(SeededRandomSource(seed), DEFAULT_LIMITS, None)
    gnum = [(2 * abs(v) - 2) ** 2 for v in y]  # γ·16
    out: list[bool] = [False] * len(y)
    table = [i for i, v in enumerate(y) if abs(v) < 192]
    scalar = 0
    for i, v in enumerate(y):
        if abs(v) >= 192:
            out[i] = _bernoulli_exp(gnum[i], 16, draws.rng)
            scalar += 1
    trials = [min(gnum[i] // 16, whole_trials) for i in table]
    pool = draws.bernoulli_exp_minus_one(sum(trials)).tolist()
    start = 0
    for i, n in zip(table, trials, strict=True):
        out[i] = all(pool[start : start + n])
        start += n
    for i in table:
        if out[i] and gnum[i] // 16 > whole_trials:
            out[i] = _bernoulli_exp(gnum[i] - 16 * whole_trials, 16, draws.rng)
            scalar += 1
    return out, scalar


@pytest.mark.parametrize("whole_trials", [16, 2, 0])
def test_accept_cuts_one_pool_into_segments(whole_trials: int) -> None:
    """σ² = 2 (t = 2, table size 192): γ(a) = (a − 1)²/4, an integer for odd a (γ(3) = 1,
    γ(5) = 4, γ(1) = 0, γ(7) = 9; γ(193) = 9216 beyond the table). The lanes' outcomes and the
    count of scalar hand-overs are exactly the replay of the seeded stream."""
    table = _GammaTable(2, 1, 16, whole_trials, 2**20)
    assert (table.t, table.size) == (2, 192)
    y = [3, 5, 1, -193, -3, 7, -5, 3, 1, -7, 3, 193]
    limits = Limits(whole_trials=whole_trials)
    accepted = scalar = 0
    for seed in range(30):
        draws = _Draws(SeededRandomSource(seed), limits, None)
        got = _accept(draws, table, np.array(y, dtype=np.int64)).tolist()
        expected, hand_overs = _replay_accept(seed, y, whole_trials)
        assert got == expected, seed
        assert draws.stats["scalar_accept_lanes"] == hand_overs, seed
        accepted += sum(got)
        scalar += hand_overs
    assert 0 < accepted < 30 * len(y)
    # 2 beyond lanes per seed; with whole_trials < 9 also passed lanes with ⌊γ⌋ > whole_trials
    assert scalar == 60 if whole_trials == 16 else scalar > 70


def test_table_entries_are_exact_and_cached() -> None:
    table = _GammaTable(NUM, DEN, 16, 16, 2**20)
    computed = Counter[int]()
    gamma = table.gamma

    def counting(a: int) -> tuple[int, int]:
        computed[a] += 1
        return gamma(a)

    table.gamma = counting  # type: ignore[method-assign]
    first = [0, 1, 2, 2, 5, 40, 255]
    for query in (first, first[::-1], [*first, 7]):
        whole, frac_bits = table.lookup(np.array(query, dtype=np.int64))
        assert list(zip(whole.tolist(), frac_bits.tolist(), strict=True)) == [_exact(table, a) for a in query]
    assert computed == Counter({a: 1 for a in {*first, 7}})  # each |Y| once per table


def test_table_fraction_bits_use_integer_division() -> None:
    """σ² = 2 − ⌊√3·2^90⌋/2^90 (just above 2 − √3, t = 1): γ(1) = (1 − σ²)²/(2σ²) lies within
    2^-54 below 1, so ⌊frac(γ)·2^16⌋ = 65535 while the float quotient rounds to 65536."""
    sigma2 = Fraction(2 * 2**90 - isqrt(3 * 4**90), 2**90)
    num, den = sigma2.numerator, sigma2.denominator
    table = _GammaTable(num, den, 16, 16, 2**20)
    assert table.t == 1
    gamma = Fraction((table.t * den - num) ** 2, 2 * num * den)
    assert 1 - Fraction(1, 2**54) < gamma < 1
    whole, frac_bits = table.lookup(np.array([1], dtype=np.int64))
    assert (int(whole[0]), int(frac_bits[0])) == (0, 65535)


# ---- random sources --------------------------------------------------------------------------------


class SeededReference:
    """SeededRandomSource's documented stream, written out: SHAKE-256(seed || counter as 8 bytes
    big-endian) in 4096-byte blocks; randbits(n) reads ⌈n/8⌉ bytes big-endian and keeps the top n
    bits; randbelow(n) rejects draws of n.bit_length() bits until one is below n."""

    def __init__(self, seed: bytes, blocks: int = 4) -> None:
        self.stream = b"".join(
            hashlib.shake_256(seed + i.to_bytes(8, "big")).digest(4096) for i in range(blocks)
        )
        self.pos = 0

    def randbits(self, n: int) -> int:
        if n <= 0:
            return 0
        size = (n + 7) // 8
        chunk = self.stream[self.pos : self.pos + size]
        assert len(chunk) == size
        self.pos += size
        return int.from_bytes(chunk, "big") >> (8 * size - n)

    def randbelow(self, n: int) -> int:
        while True:
            r = self.randbits(n.bit_length())
            if r < n:
                return r


@pytest.mark.parametrize(
    ("seed", "encoded"),
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x00\x80"),
        (255, b"\x00\xff"),
        (-1, b"\xff"),
        (-129, b"\xff\x7f"),
        (2**64, b"\x01" + bytes(8)),
        ("seed", b"seed"),
        (b"\x00\x01", b"\x00\x01"),
        (bytearray(b"ab"), b"ab"),
    ],
)
def test_seeded_stream_format(seed: int | bytes | str, encoded: bytes) -> None:
    src, ref = SeededRandomSource(seed), SeededReference(encoded)
    for n in (1, 7, 8, 9, 0, 64, 3, -2, 4096 * 8 - 20, 13, 4096 * 16 + 5, 17, 2):
        assert src.randbits(n) == ref.randbits(n), n
    for n in (1, 2, 3, 5, 6, 7, 100, 255, 256, 257, 10**9, 2**64 + 1):
        assert src.randbelow(n) == ref.randbelow(n), n
    assert src._take(3) == ref.stream[ref.pos : ref.pos + 3]
    for bad in (0, -5):
        with pytest.raises(ValueError, match="^randbelow: n must be >= 1"):
            src.randbelow(bad)


def test_keyed_stream_format() -> None:
    """KeyedRandomSource(key, context) is the seeded stream of key || 0x00 || context."""
    key = bytes(range(32))
    src, ref = KeyedRandomSource(key, "epoch-7"), SeededReference(key + b"\x00epoch-7")
    assert [src.randbits(n) for n in (64, 5, 4096 * 8, 9)] == [ref.randbits(n) for n in (64, 5, 4096 * 8, 9)]


class Script:
    """randbits(n) (n a multiple of 8) returns the next n/8 scripted bytes read little-endian (the
    words _Draws unpacks), zeros once the script runs out; every call's n is recorded."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0
        self.calls: list[int] = []

    def randbits(self, n: int) -> int:
        assert n % 8 == 0
        self.calls.append(n)
        chunk = self.data[self.pos : self.pos + n // 8]
        self.pos += n // 8
        return int.from_bytes(chunk.ljust(n // 8, b"\x00"), "little")

    def randbelow(self, n: int) -> int:  # pragma: no cover - not used by these tests
        raise AssertionError("unexpected randbelow")


def test_words_refills_and_bytes() -> None:
    """Refills take max(missing, 4096 bytes' worth, a quarter of all drawn of that width) words, and
    the words are the source's bytes in order (little-endian), each width its own stream."""
    rng = Recording(31)
    draws = _Draws(rng, DEFAULT_LIMITS, None)
    ref = SeededReference(SeededRandomSource(31)._seed, blocks=40)
    # ... then exactly the 3182 8-bit words left (no refill yet), 16-bit words, one more 8-bit word
    asked = [(10, 8), (5000, 8), (3, 16), (20_000, 32), (1, 32), (5000, 32), (0, 8), (4096, 8)]
    asked += [(3182, 8), (2046, 16), (1, 8)]
    got = [draws.words(count, width).copy() for count, width in asked]
    assert [n for _, n in rng.calls] == [
        8 * 4096,
        8 * 4096,
        16 * 2048,
        32 * 20_000,
        32 * 5000,
        32 * 6250,
        8 * 4096,
        16 * 2048,
        8 * 4096,
    ]
    streams: dict[int, bytes] = {8: b"", 16: b"", 32: b""}
    for (name, n), width in zip(rng.calls, (8, 8, 16, 32, 32, 32, 8, 16, 8), strict=True):
        assert name == "randbits"
        streams[width] += ref.randbits(n).to_bytes(n // 8, "little")
    offset = dict.fromkeys(streams, 0)
    for (count, width), words in zip(asked, got, strict=True):
        size = count * width // 8
        expected = np.frombuffer(
            streams[width][offset[width] : offset[width] + size], dtype=f"<u{width // 8}"
        )
        offset[width] += size
        assert words.dtype == expected.dtype and np.array_equal(words, expected)


def test_uniform_words_are_exact_by_enumeration() -> None:
    """below(b) and bernoulli(a, b) over every word value once: x // q is each value in [0, b)
    exactly q times, x < a·q is true exactly a·q times, and the words x >= q·b are redrawn."""
    every8 = bytes(range(256)) * 16  # one 4096-word refill of 8-bit words, every value 16 times
    draws = _Draws(Script(every8), DEFAULT_LIMITS, None)  # bound 3: 8-bit words, q = 85
    values = draws.below(3, 255).tolist()
    assert Counter(values) == {0: 85, 1: 85, 2: 85} and values[:4] == [0, 0, 0, 0] and values[-1] == 2
    assert draws.below(3, 2).tolist() == [0, 0]  # word 255 rejected, the next words are 0 and 1
    for a in range(4):
        draws = _Draws(Script(every8), DEFAULT_LIMITS, None)
        assert int(draws.bernoulli(a, 3, 255).sum()) == 85 * a
    lanes = np.array([0, 1, 2, 3] * 64)  # a per lane
    draws = _Draws(Script(every8), DEFAULT_LIMITS, None)
    hits = draws.bernoulli(lanes, 3, 256)  # word 255 (lane 255, a = 3) is redrawn as 0
    assert hits.tolist() == [x < a * 85 for x, a in zip([*range(255), 0], lanes.tolist(), strict=True)]

    every16 = np.arange(65536, dtype="<u2").tobytes()  # bound 1000: 16-bit words, q = 65
    rng = Script(every16 + bytes(2 * 2048))
    draws = _Draws(rng, DEFAULT_LIMITS, None)
    values = draws.below(1000, 65536)
    assert values.dtype == np.int64
    counts = Counter(values.tolist())
    assert counts[0] == 65 + 536 and all(counts[v] == 65 for v in range(1, 1000)) and len(counts) == 1000
    assert rng.calls == [16 * 65536, 16 * 16384]  # the 536 words >= 65000 redrawn from a refill
    assert _Draws(Script(b""), DEFAULT_LIMITS, None).below(1, 5).tolist() == [0] * 5  # no draw needed
    rec = Recording(1)
    draws = _Draws(rec, Limits(word_bound=2), None)  # bounds above word_bound: randbelow per lane
    ref = SeededRandomSource(1)
    assert draws.below(3, 4).tolist() == [ref.randbelow(3) for _ in range(4)]
    assert draws.bernoulli(1, 3, 3).tolist() == [ref.randbelow(3) < 1 for _ in range(3)]
    assert draws.below(2, 2).dtype == np.int64 and rec.calls[-1] == ("randbits", 8 * 4096)
    assert rec.calls[:7] == [("randbelow", 3)] * 7 and draws.stats["randbelow_lanes"] == 7


def _below_reference(data: bytes, bound: int, width: int, count: int) -> list[int]:
    """Uniform values below ``bound`` from the ``width``-bit little-endian words of ``data``: with
    q = 2**width // bound, the first ``count`` words, each word >= q·bound replaced (in index
    order, repeatedly) by the next unused word; the value is word // q."""
    words = np.frombuffer(data, dtype=f"<u{width // 8}").tolist()
    q = 2**width // bound
    x, nxt = words[:count], count
    bad = [i for i, w in enumerate(x) if w >= q * bound]
    while bad:
        for i in bad:
            x[i], nxt = words[nxt], nxt + 1
        bad = [i for i in bad if x[i] >= q * bound]
    return [w // q for w in x]


@pytest.mark.parametrize(
    ("bound", "width"),
    [(2, 8), (3, 8), (4, 8), (5, 16), (1000, 16), (2**10, 16), (2**10 + 1, 32), (2**26, 32), (2**26 + 1, 32)],
)
def test_word_width_is_the_narrowest_with_bound_at_most_a_64th(bound: int, width: int) -> None:
    """A bound b is drawn from L-bit words, L the narrowest of 8, 16, 32 with b <= 2**(L-6)."""
    data = hashlib.shake_256(b"words").digest(4096)
    draws = _Draws(Script(data), DEFAULT_LIMITS, None)
    assert draws.below(bound, 300).tolist() == _below_reference(data, bound, width, 300)


def test_wide_bounds_use_32_bit_words_exactly() -> None:
    """Bounds above 2**26 use 32-bit words: bound 3·2**30 has q = 1 (words >= 3·2**30 redrawn),
    bound 2**32 takes every word as it is."""
    words = [0, 2**32 - 1, 5, 3 * 2**30 - 1, 3 * 2**30, 7, 2**31]
    data = np.array(words, dtype="<u4").tobytes()
    draws = _Draws(Script(data), DEFAULT_LIMITS, None)
    assert draws.below(3 * 2**30, 4).tolist() == [0, 7, 5, 3 * 2**30 - 1]
    draws = _Draws(Script(data), DEFAULT_LIMITS, None)
    assert draws.below(2**32, 7).tolist() == words
    draws = _Draws(Script(data), DEFAULT_LIMITS, None)
    assert draws.bernoulli(2**31 + 1, 2**32, 7).tolist() == [w <= 2**31 for w in words]


def test_geometric_cuts_one_flat_trial_sequence() -> None:
    """V_1, V_2, ... are the success runs of one flat sequence of Bernoulli(exp(-1)) trials, however
    the batches fall: scripted trials with runs 5, 0, 70, 2, 0, 0, 1, 45, ... make geometric(4) end
    its first batch (38 trials) inside the run of 70, draw a batch (35) with no failure at all, and
    carry both into the next batch; below, a first batch with exactly one failure."""
    runs = [5, 0, 70, 2, 0, 0, 1, 45, 3, 0, 120, 4, 1, 0, 2]
    flat = [t for r in runs for t in [True] * r + [False]] + [False] * 400

    def scripted(draws: _Draws) -> list[int]:
        sizes: list[int] = []
        pos = 0

        def trials(size: int) -> np.ndarray:
            nonlocal pos
            sizes.append(size)
            pos += size
            assert pos <= len(flat), "more trials drawn than the runs need"
            return np.array(flat[pos - size : pos], dtype=bool)

        draws.bernoulli_exp_minus_one = trials  # type: ignore[method-assign]
        return sizes

    draws = _Draws(SeededRandomSource(1), DEFAULT_LIMITS, None)
    sizes = scripted(draws)
    assert draws.geometric(4).tolist() == [5, 0, 70, 2]
    assert sizes == [38, 35, 35]
    draws = _Draws(SeededRandomSource(1), DEFAULT_LIMITS, None)
    scripted(draws)
    assert draws.geometric(len(runs)).tolist() == runs
    # geometric(2): the first batch of 35 holds one failure (after 33 successes), the second (33)
    # none, the third ends the run of 1 + 33 + 9 successes
    flat[:34] = [True] * 33 + [False]
    draws = _Draws(SeededRandomSource(1), DEFAULT_LIMITS, None)
    sizes = scripted(draws)
    assert draws.geometric(2).tolist() == [33, 43]
    assert sizes == [35, 33, 33]


def test_below_returns_int64_also_when_empty() -> None:
    for limits in (DEFAULT_LIMITS, Limits(word_bound=2)):
        draws = _Draws(SeededRandomSource(1), limits, None)
        for bound in (1, 3, 2**20):
            for count in (0, 2):
                assert draws.below(bound, count).dtype == np.int64


def test_crypto_source_ranges_and_edges() -> None:
    """False-failure rates: 64 draws of randbits(1) all equal, 2^-63; 4 equal 64-bit words, 2^-192;
    randbelow(3) missing a value in 100 draws, 3·(2/3)^100 < 10^-17."""
    src = CryptoRandomSource()
    assert src.randbits(0) == 0
    assert src.randbits(-1) == 0  # as SeededRandomSource: n <= 0 gives the only value below 2^0
    assert SeededRandomSource(1).randbits(-1) == 0
    bits = {src.randbits(1) for _ in range(64)}
    assert bits == {0, 1}
    words = [src.randbits(64) for _ in range(4)]
    assert len(set(words)) > 1 and all(0 <= w < 2**64 for w in words)
    assert all(0 <= src.randbits(5) < 32 for _ in range(50))
    assert src.randbelow(1) == 0
    assert {src.randbelow(3) for _ in range(100)} == {0, 1, 2}
    for bad in (0, -1):
        with pytest.raises(ValueError, match="randbelow: n must be >= 1"):
            src.randbelow(bad)


def test_keyed_source_requires_a_long_byte_key() -> None:
    for bad in (b"k" * 31, bytearray(5), "k" * 40, 12345678901234567890123456789012345):
        with pytest.raises(ValueError, match="^key: must be at least 32"):
            KeyedRandomSource(bad, "ctx")  # type: ignore[arg-type]
    ok = KeyedRandomSource(bytearray(b"k" * 32), "ctx")
    assert ok.randbits(64) == KeyedRandomSource(b"k" * 32, "ctx").randbits(64)


def test_new_noise_key() -> None:
    """Collision rate of two 256-bit keys: 2^-256."""
    key = new_noise_key()
    assert isinstance(key, bytes) and len(key) == KeyedRandomSource.MIN_KEY_BYTES
    assert key != new_noise_key()
    KeyedRandomSource(key, "ctx")


# ---- pinned streams --------------------------------------------------------------------------------

HARD = Limits(word_bound=6, compare_bits=1, whole_trials=1, table_size=8)  # every hand-over, often


def _digest(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.int64).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("sample", "digest", "hand_overs"),
    [
        (lambda st: gaussian_array(37, 5, 3000, SeededRandomSource(1), stats=st), "bdd34d371155338a", {}),
        (
            lambda st: gaussian_array(10**21 + 7, 3**40, 2000, SeededRandomSource(2), stats=st),
            "be6d16a56d2e9e97",
            {},
        ),
        (lambda st: gaussian_array(1, 50, 2000, SeededRandomSource(3), stats=st), "f85f2c34eb2843d2", {}),
        (
            lambda st: gaussian_array(37, 5, 2000, SeededRandomSource(4), HARD, st),
            "ef3eddb409e92f6b",
            {"randbelow_lanes": 598, "scalar_accept_lanes": 257, "compare_ties": 1843},
        ),
        (
            lambda st: gaussian_array(
                37, 5, 2000, SeededRandomSource(10), Limits(whole_trials=1, compare_bits=2), st
            ),
            "b869e5b755816719",
            {"scalar_accept_lanes": 80, "compare_ties": 945},
        ),
        (
            lambda st: gaussian_array(
                37, 5, 2000, SeededRandomSource(10), Limits(whole_trials=0, compare_bits=3), st
            ),
            "22a3bac216f7807d",
            {"scalar_accept_lanes": 349, "compare_ties": 460},
        ),
        (  # σ² = 2: γ(a) an integer for odd a, so ties with nothing left to compare (r = 0)
            lambda st: gaussian_array(2, 1, 2000, SeededRandomSource(11), Limits(compare_bits=1), st),
            "f3fb0b454412cad2",
            {"compare_ties": 1393},
        ),
        (lambda st: laplace_array(7, 3, 3000, SeededRandomSource(5), stats=st), "c9f3bc91d8190cba", {}),
        (lambda st: laplace_array(1000003, 7, 2000, SeededRandomSource(6), stats=st), "e46cdbf53cecd0a6", {}),
        (
            lambda st: laplace_array(7, 3, 2000, SeededRandomSource(7), HARD, st),
            "e87c89c5289123ca",
            {"randbelow_lanes": 12219},
        ),
        (
            lambda st: np.concatenate(
                [
                    discrete_laplace_array(Fraction(7, 3), 11, SeededRandomSource(8)),
                    discrete_gaussian_array(Fraction(37, 5), 11, SeededRandomSource(9)),
                    np.array([bernoulli_exp(Fraction(g, 3), SeededRandomSource(g)) for g in range(12)]),
                ]
            ),
            "6e1b0e7145965a0f",
            {},
        ),
    ],
)
def test_pinned_sample_streams(sample, digest: str, hand_overs: dict[str, int]) -> None:  # noqa: ANN001
    """The seeded bit -> sample mapping of the vectorised and scalar samplers, pinned (as in
    tests/test_noise_vectorised.py::test_pinned_streams, over whole arrays and the hand-over paths):
    a keyed source replays an epoch's noise after a restore, so any change of which bits make which
    sample must fail here (and come with a new noise-context version). Also pins the counts of
    exact scalar hand-overs (randbelow lanes, scalar acceptance tests, comparison ties)."""
    stats = Counter[str]()
    assert _digest(sample(stats)) == digest
    assert dict(stats) == hand_overs
