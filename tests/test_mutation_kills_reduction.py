"""Lebeda–Tětek ("Better Differentially Private Approximate Histograms and Heavy Hitters using the
Misra-Gries Sketch") Alg. 3 (sensitivity reduction, §6–7) and Alg. 4 (Privacy-Aware Misra–Gries,
§8), each against an independent reference written here from the paper.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py reduction``).

* Alg. 3. γ = Σ_x c_x / (k+1); keep the keys with c_x > γ, with value c_x − γ, in exact Fractions.
  The sketch's counters come from the textbook Misra–Gries of tests/test_sketch_reference.py
  (standard MG and Alg. 1 have the same counters, §4). Ties c_x·(k+1) = Σc (c_x = γ exactly: not kept) are built on purpose.
  Lemma 6.2 (ℓ1 distance < 2 between the reduced vectors of neighbouring streams) is checked on
  every one-event removal and on one extra early event, which shifts every later decrement. §7:
  per-partition reduced sketches are summed key-wise (n and partitions add up); the binary
  decoder refuses what no Alg. 3 output can hold (dummy keys, values <= 0, more than k keys per
  partition, k or partitions < 1, a build Alg. 3 does not apply to).
* Alg. 4 (PAMG). For each user: add 1 to each of the user's items (inserting at 1); if more than k
  keys are stored, decrement every counter once and drop zeros (Lemma 8.9's per-user step). The
  sketch's ``update``, ``update_batch`` and ``update_batch_flat`` (the compiled kernel, run as
  Python here; and the item path taken when a str key is stored) are compared with it on random
  user streams, and the user checks (at most m distinct items, the offsets' shape) on inputs that
  trip exactly one condition each, on both distinctness paths (pairwise grid for users of <= 16
  items, lexsort above).

Deterministic (fixed seeds).
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

import numpy as np
import pytest

from privstream.sketches import (
    Build,
    Dummy,
    MisraGries,
    PrivacyAwareMisraGries,
    ReducedSketch,
    SketchFormatError,
    StandardMisraGries,
    check_user_items,
    merge_in_order,
    reduce_sensitivity,
    sum_reduced,
)
from privstream.sketches.binary_format import encode, encode_counters
from tests.test_sketch_reference import textbook_mg

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


# ---- independent references ------------------------------------------------------------------------


def _alg3(k: int, counters: dict) -> dict:
    """Alg. 3: γ = Σc/(k+1); keep c > γ with value c − γ (exact)."""
    gamma = Fraction(sum(counters.values()), k + 1)
    return {x: c - gamma for x, c in counters.items() if c > gamma}


def _order(x: object) -> tuple:
    """The universe's order: ints numerically, then strs."""
    return (0, x) if isinstance(x, int) else (1, x)


def _alg4(k: int, users: list[list]) -> dict:
    """Alg. 4, user by user."""
    c: dict = {}
    for user in users:
        for x in user:
            c[x] = c.get(x, 0) + 1
        if len(c) > k:
            c = {y: v - 1 for y, v in c.items() if v - 1 > 0}
    return c


def _l1(a: dict, b: dict) -> Fraction:
    return sum((abs(a.get(x, 0) - b.get(x, 0)) for x in set(a) | set(b)), Fraction(0))


def _built(cls: type, k: int, stream: list):
    sketch = cls(k)
    for x in stream:
        sketch.update(x)
    return sketch


def _check_reduced(reduced: ReducedSketch, k: int, stream: list) -> None:
    expected = _alg3(k, textbook_mg(k, stream))
    values = reduced.values()
    assert values == expected
    assert list(values) == sorted(expected, key=_order)  # the universe's order
    assert reduced.numerators == {x: int(v * (k + 1)) for x, v in expected.items()}
    assert all(type(v) is int for v in reduced.numerators.values())
    assert reduced.denominator == k + 1
    assert reduced.k == k and reduced.n == len(stream) and reduced.partitions == 1
    for x in set(stream) | {10**6, "zz"}:
        assert reduced.estimate(x) == expected.get(x, 0)


# ---- Alg. 3 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [MisraGries, StandardMisraGries])
def test_alg3_equals_the_reference_on_random_sketches(cls: type) -> None:
    rng = random.Random(31)
    ties = 0
    for _ in range(300):
        k = rng.randint(1, 6)
        domain = [*range(rng.randint(1, 9)), "a", "b"][: rng.randint(1, 11)]
        stream = [rng.choice(domain) for _ in range(rng.randint(0, 40))]
        sketch = _built(cls, k, stream)
        reduced = reduce_sensitivity(sketch)
        _check_reduced(reduced, k, stream)
        assert reduced.source_build is sketch.build
        counters = textbook_mg(k, stream)
        ties += any(c * (k + 1) == sum(counters.values()) for c in counters.values())
    assert ties >= 10  # the c = γ boundary was exercised


def test_alg3_drops_a_counter_exactly_at_gamma() -> None:
    """k = 2, counters {1: 2, 2: 1}: γ = 1, so 2 is not kept (value 0) and 1 keeps 2 − 1 = 1; k = 3,
    counters {5: 2, 6: 1, 7: 1}: γ = 1, only 5 is kept with 1 (numerator 2·4 − 4 = 4)."""
    r = reduce_sensitivity(_built(StandardMisraGries, 2, [1, 1, 2]))
    assert r.numerators == {1: 3} and r.values() == {1: Fraction(1)}
    assert r.estimate(2) == 0 and r.estimate(np.int64(1)) == 1
    r = reduce_sensitivity(_built(MisraGries, 3, [5, 6, 5, 7]))
    assert r.numerators == {5: 4} and r.values() == {5: Fraction(1)}
    assert r.denominator == 4 and r.error_bound == Fraction(4, 4)


def test_alg3_lemma_6_2_on_removals_and_an_early_extra_event() -> None:
    """Lemma 6.2: ℓ1 < 2 between the reduced vectors of neighbouring streams, for every single
    event removed and for one extra event at the front (every later decrement moves)."""
    rng = random.Random(7)
    for _ in range(60):
        k = rng.randint(1, 4)
        stream = [rng.randint(0, 6) for _ in range(rng.randint(1, 30))]
        for cls in (MisraGries, StandardMisraGries):
            base = reduce_sensitivity(_built(cls, k, stream)).values()
            neighbours = [stream[:i] + stream[i + 1 :] for i in range(len(stream))]
            neighbours += [[x, *stream] for x in (0, 3, 99)] + [stream[:1] + [99] + stream[1:]]
            for other in neighbours:
                values = reduce_sensitivity(_built(cls, k, other)).values()
                assert values == _alg3(k, textbook_mg(k, other))
                assert _l1(base, values) < 2


def test_alg3_refuses_sketches_without_the_lemma_2_structure() -> None:
    merged = _built(StandardMisraGries, 3, [1, 2])
    merged.merge(_built(StandardMisraGries, 3, [1]))
    for bad, named in (
        (merged, "StandardMisraGries with build MERGED;"),
        (PrivacyAwareMisraGries(3, 1), "PrivacyAwareMisraGries with build PAMG;"),
        ({1: 2}, "dict with build None;"),
    ):
        with pytest.raises(ValueError, match=f"got {named} .*sum_reduced"):  # the refused build is named
            reduce_sensitivity(bad)  # type: ignore[arg-type]


def test_sum_reduced_is_the_keywise_sum_of_partitions() -> None:
    rng = random.Random(3)
    for _ in range(40):
        k = rng.randint(1, 4)
        streams = [[rng.choice([0, 1, 2, 3, "s", "t"]) for _ in range(rng.randint(0, 20))] for _ in range(3)]
        classes = [rng.choice([MisraGries, StandardMisraGries]) for _ in streams]
        parts = [reduce_sensitivity(_built(c, k, s)) for c, s in zip(classes, streams, strict=True)]
        total = sum_reduced(iter(parts))
        expected: dict = {}
        for s in streams:
            for x, v in _alg3(k, textbook_mg(k, s)).items():
                expected[x] = expected.get(x, 0) + v
        assert total.values() == expected and list(total.values()) == sorted(expected, key=_order)
        assert total.k == k and total.denominator == k + 1
        assert total.n == sum(map(len, streams)) and total.partitions == 3
        assert total.error_bound == Fraction(total.n, k + 1)
        builds = {p.source_build for p in parts}
        assert total.source_build is (builds.pop() if len(builds) == 1 else Build.STANDARD_SEQUENTIAL)
        again = sum_reduced([total, parts[0]])
        assert again.partitions == 4 and again.n == total.n + parts[0].n
    only_alg1 = sum_reduced([reduce_sensitivity(_built(MisraGries, 2, [1, 1]))] * 2)
    assert only_alg1.source_build is Build.ALG1_SEQUENTIAL and only_alg1.numerators == {1: 8}


def test_sum_reduced_labels_parts_of_different_builds_standard_sequential() -> None:
    """Parts of different builds sum to a STANDARD_SEQUENTIAL label, never to one part's build.
    Which build a set pops first depends on object ids (it varies between processes), so the
    parts here are hand-built with two builds neither of which is STANDARD_SEQUENTIAL: a result
    taken from one of the parts is then told apart in every process."""
    parts = [
        ReducedSketch(2, 3, {1: 2}, Build.ALG1_SEQUENTIAL),
        ReducedSketch(2, 4, {1: 1, 5: 3}, Build.MERGED),
    ]
    for order in (parts, parts[::-1]):
        total = sum_reduced(order)
        assert total.source_build is Build.STANDARD_SEQUENTIAL
        assert total.numerators == {1: 3, 5: 3} and total.n == 7 and total.partitions == 2


def _reduced_bytes(k: int, n: int, build: Build, partitions: int, numerators: dict) -> bytes:
    return encode(ReducedSketch, [k, n, build.code, partitions], encode_counters(numerators))


def test_reduced_from_bytes_round_trip_and_boundaries() -> None:
    r = reduce_sensitivity(_built(StandardMisraGries, 3, ["b", 4, 4, 4, 2, 2, "a", "b", "b", 4]))
    back = ReducedSketch.from_bytes(r.to_bytes())
    assert back == r and list(back.numerators) == list(r.numerators)
    # the boundaries that must be accepted: k = partitions = 1, exactly k·partitions keys, value 1
    one = ReducedSketch.from_bytes(_reduced_bytes(1, 5, Build.ALG1_SEQUENTIAL, 1, {7: 1}))
    assert one.numerators == {7: 1} and one.source_build is Build.ALG1_SEQUENTIAL
    assert one.k == 1 and one.n == 5 and one.partitions == 1 and one.estimate(7) == Fraction(1, 2)
    full = ReducedSketch.from_bytes(
        _reduced_bytes(2, 9, Build.STANDARD_SEQUENTIAL, 2, {"x": 3, 9: 1, 3: 2, -1: 5})
    )
    assert list(full.numerators.items()) == [(-1, 5), (3, 2), (9, 1), ("x", 3)]
    assert full.partitions == 2 and full.values()[3] == Fraction(2, 3)


def _exactly(message: str) -> str:
    """A ``match`` pattern for exactly this error message."""
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize(
    ("k", "build", "partitions", "numerators", "message"),
    [
        (0, Build.STANDARD_SEQUENTIAL, 1, {}, "k and partitions must be >= 1"),
        (2, Build.STANDARD_SEQUENTIAL, 0, {}, "k and partitions must be >= 1"),
        (2, Build.MERGED, 1, {1: 1}, "build MERGED cannot be reduced"),  # no Lemma 2 structure
        (2, Build.PAMG, 1, {1: 1}, "build PAMG cannot be reduced"),
        (2, Build.STANDARD_SEQUENTIAL, 1, {1: 1, 2: 1, 3: 1}, "more than k keys per partition"),
        (1, Build.STANDARD_SEQUENTIAL, 2, {1: 1, 2: 1, 3: 1}, "more than k keys per partition"),
        (2, Build.STANDARD_SEQUENTIAL, 1, {Dummy(0): 1}, "bad reduced values"),
        (3, Build.STANDARD_SEQUENTIAL, 1, {1: 2, Dummy(1): 3}, "bad reduced values"),
        (2, Build.STANDARD_SEQUENTIAL, 1, {1: 0}, "bad reduced values"),
        (2, Build.STANDARD_SEQUENTIAL, 1, {1: 2, "a": -1}, "bad reduced values"),
    ],
)
def test_reduced_from_bytes_refuses_what_alg3_cannot_output(
    k, build, partitions, numerators, message
) -> None:
    with pytest.raises(SketchFormatError, match=_exactly(message)):
        ReducedSketch.from_bytes(_reduced_bytes(k, 10, build, partitions, numerators))


# ---- Alg. 4 (PAMG) ---------------------------------------------------------------------------------


def _random_users(rng: random.Random, m: int, count: int, domain: list) -> list[list]:
    return [rng.sample(domain, rng.randint(0, min(m, len(domain)))) for _ in range(count)]


def _flat(users: list[list], dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    items = np.array([x for u in users for x in u], dtype=dtype)
    offsets = np.concatenate([[0], np.cumsum([len(u) for u in users])]).astype(np.int64)
    return items, offsets


def _check_pamg(sketch: PrivacyAwareMisraGries, k: int, users: list[list]) -> None:
    expected = _alg4(k, users)
    assert sketch.counters() == dict(sorted(expected.items(), key=lambda p: _order(p[0])))
    for x in {x for u in users for x in u} | {12345}:
        assert sketch.estimate(x) == expected.get(x, 0)
    assert all(type(c) is int for c in sketch.counters().values())  # exact integer counts
    assert sketch.n == sum(map(len, users)) and sketch.n_users == len(users)
    assert sketch.build is Build.PAMG


def test_pamg_paths_equal_the_reference_on_random_users() -> None:
    """update, update_batch and update_batch_flat (cut into random batches, continuing from the
    previous state) against Alg. 4; int items include 0, negatives and the int64 extremes."""
    rng = random.Random(11)
    extremes = [0, -1, INT64_MIN, INT64_MAX, 2**40]
    for trial in range(80):
        m = rng.randint(1, 5)
        k = m + rng.randint(1, 4)
        domain = sorted(set(range(-3, rng.randint(m + 1, 14))) | set(extremes))
        users = _random_users(rng, m, rng.randint(0, 40), domain)
        one, batch, flat = (PrivacyAwareMisraGries(k, m) for _ in range(3))
        at = 0
        while at < len(users):
            size = rng.randint(0, 8)
            chunk = users[at : at + size]
            for u in chunk:
                one.update(u)
            batch.update_batch(chunk)
            flat.update_batch_flat(*_flat(chunk))
            at += size
            for sketch in (one, batch, flat):
                _check_pamg(sketch, k, users[:at])
        if trial % 4 == 0:  # unsigned items and offsets take the same path
            unsigned = PrivacyAwareMisraGries(k, m)
            nonneg = [[x for x in u if x >= 0] for u in users]
            items, offsets = _flat(nonneg, np.uint64)
            unsigned.update_batch_flat(items, offsets.astype(np.uint32))
            _check_pamg(unsigned, k, nonneg)


def test_pamg_flat_batch_on_a_sketch_holding_str_keys_takes_the_item_path() -> None:
    rng = random.Random(5)
    for _ in range(30):
        m = rng.randint(1, 4)
        k = m + rng.randint(1, 3)
        prefix = _random_users(rng, m, rng.randint(1, 6), ["a", "b", "c", 1, 2, 3])
        users = _random_users(rng, m, rng.randint(0, 30), list(range(8)))
        sketch = PrivacyAwareMisraGries(k, m)
        sketch.update_batch(prefix)
        sketch.update_batch_flat(*_flat(users))
        _check_pamg(sketch, k, prefix + users)
    sketch = PrivacyAwareMisraGries(3, 2)
    sketch.update(["s", 4])
    sketch.update_batch_flat(np.array([4, 5, 6, 7, 4], dtype=np.int64), np.array([0, 2, 3, 5]))
    _check_pamg(sketch, 3, [["s", 4], [4, 5], [6], [7, 4]])


def test_pamg_decrements_once_per_user_when_above_k() -> None:
    """k = 3, m = 2: {1,2}, {3} fill 3 keys (no decrement at exactly k); {4} makes 4 keys: all
    decremented once, 2..4 dropped; a user making exactly k keys again is kept without decrement."""
    sketch = PrivacyAwareMisraGries(3, 2)
    sketch.update_batch_flat(np.array([1, 2, 3, 1], dtype=np.int64), np.array([0, 2, 3, 4]))
    assert sketch.counters() == {1: 2, 2: 1, 3: 1}
    sketch.update_batch_flat(np.array([4], dtype=np.int64), np.array([0, 1]))
    assert sketch.counters() == {1: 1}
    sketch.update_batch_flat(np.array([5, 6], dtype=np.int64), np.array([0, 2]))
    assert sketch.counters() == {1: 1, 5: 1, 6: 1} and sketch.n == 7 and sketch.n_users == 5
    sketch.update_batch_flat(np.array([5, 7, 5, 6], dtype=np.int64), np.array([0, 2, 4]))
    _check_pamg(sketch, 3, [[1, 2], [3], [1], [4], [5, 6], [5, 7], [5, 6]])


def test_check_user_items() -> None:
    assert check_user_items(3, [np.int64(4), "a", 2]) == (4, "a", 2)
    assert check_user_items(2, []) == ()
    with pytest.raises(ValueError, match="at most m=2"):
        check_user_items(2, [1, 2, 3])
    with pytest.raises(ValueError, match="distinct"):
        check_user_items(3, [1, 2, 1])
    with pytest.raises(ValueError, match="distinct"):
        check_user_items(3, [np.int64(1), 1])


def test_pamg_update_refuses_bad_users_and_keeps_the_state() -> None:
    sketch = PrivacyAwareMisraGries(4, 3)
    sketch.update([1, 2, 3])  # exactly m items
    sketch.update([])
    for bad in ([1, 2, 3, 4], [5, 5], ["x", "x"]):
        with pytest.raises(ValueError):
            sketch.update(bad)
    with pytest.raises(ValueError):
        sketch.update_batch([[7], [8, 9], [1, 1]])
    _check_pamg(sketch, 4, [[1, 2, 3], []])


def test_pamg_flat_batch_accepts_exactly_m_and_empty_batches() -> None:
    sketch = PrivacyAwareMisraGries(5, 3)
    sketch.update_batch_flat(np.zeros(0, dtype=np.int64), np.array([0]))
    sketch.update_batch_flat(np.zeros(0, dtype=np.int64), np.array([0, 0, 0]))
    sketch.update_batch_flat(np.array([9, 8, 7], dtype=np.int64), np.array([0, 3]))
    _check_pamg(sketch, 5, [[], [], [9, 8, 7]])


@pytest.mark.parametrize(
    ("items", "offsets", "error"),
    [
        ([1, 2, 3], [1, 2, 3], ValueError),  # does not start at 0 (ends at len, non-decreasing)
        ([1, 2, 3], [0, 1, 2], ValueError),  # does not end at len(items)
        ([1, 2, 3], [0, 2, 1, 3], ValueError),  # decreasing (starts at 0, ends at len)
        ([1, 2, 3, 4], [0, 3, 4], ValueError),  # a user of m + 1 items
        ([1, 2, 3], [], TypeError),
        ([[1, 2]], [0, 2], TypeError),
        ([1, 2], [[0, 2]], TypeError),
        ([1.0, 2.0], [0, 2], TypeError),
        ([1, 2], [0.0, 2.0], TypeError),
        ([True, False], [0, 2], TypeError),
    ],
)
def test_pamg_flat_batch_refuses_bad_offsets_and_arrays(items, offsets, error) -> None:
    sketch = PrivacyAwareMisraGries(4, 2)
    sketch.update([1])
    off = np.array(offsets) if offsets else np.zeros(0, dtype=np.int64)
    with pytest.raises(error):
        sketch.update_batch_flat(np.array(items), off)
    _check_pamg(sketch, 4, [[1]])


def test_pamg_flat_batch_refuses_unsigned_items_above_int64_max() -> None:
    sketch = PrivacyAwareMisraGries(4, 2)
    with pytest.raises(ValueError, match="64-bit"):
        sketch.update_batch_flat(np.array([5, 2**63], dtype=np.uint64), np.array([0, 1, 2]))
    sketch.update_batch_flat(np.array([5, INT64_MAX], dtype=np.uint64), np.array([0, 1, 2]))
    _check_pamg(sketch, 4, [[5], [INT64_MAX]])


@pytest.mark.parametrize("width", [2, 3, 16, 17, 30])
def test_pamg_flat_distinctness_on_both_paths(width: int) -> None:
    """Uneven user sizes (shorter rows are padded with 0 in the grid; 0 is a legal item), every
    repeated pair position (i, j) of a user, and the offender reported is the first bad user."""
    rng = random.Random(width)
    m = width
    sizes = [width, 1, 0, width - 1, 2, width]
    users = [rng.sample([0, *range(100, 200)], s) for s in sizes]
    users[1] = [0]
    sketch = PrivacyAwareMisraGries(m + 1, m)
    sketch.update_batch_flat(*_flat(users))
    _check_pamg(sketch, m + 1, users)
    for victim in (0, 3, 4, 5):
        size = sizes[victim]
        pairs = [(i, j) for j in range(size) for i in range(j)]
        for i, j in pairs if width <= 3 else rng.sample(pairs, min(6, len(pairs))) + [(0, 1), (0, size - 1)]:
            bad = [list(u) for u in users]
            bad[victim][j] = bad[victim][i]
            with pytest.raises(ValueError, match=f"user {victim} "):
                sketch.update_batch_flat(*_flat(bad))
            if victim == 3:  # a later user repeating too: the first one is reported
                bad[5][1] = bad[5][0]
                with pytest.raises(ValueError, match="user 3 "):
                    sketch.update_batch_flat(*_flat(bad))
    _check_pamg(sketch, m + 1, users)


def test_pamg_flat_distinctness_keeps_large_ints_apart_in_uneven_rows() -> None:
    """Distinct int64 items that one float64 would merge (2^60 and 2^60 + 1) in a user shorter than
    another (the zero-padded grid): they are distinct, so the batch is accepted."""
    users = [[5, 6, 7], [2**60, 2**60 + 1], [INT64_MAX, INT64_MAX - 1, 3]]
    sketch = PrivacyAwareMisraGries(6, 3)
    sketch.update_batch_flat(*_flat(users))
    _check_pamg(sketch, 6, users)


def test_pamg_parameters_merge_and_accumulator() -> None:
    a = PrivacyAwareMisraGries(np.int64(5), np.int64(2))
    assert a.m == 2 and a.k == 5 and a.n_users == 0 and a.n == 0
    for k, m in ((3, 3), (3, 4)):
        with pytest.raises(ValueError, match="m must be < k"):
            PrivacyAwareMisraGries(k, m)
    for m, error in ((0, ValueError), (1.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="^m: "):  # check_int names the parameter
            PrivacyAwareMisraGries(3, m)  # type: ignore[arg-type]
    a.update_batch([[1, 2], [1]])
    b = PrivacyAwareMisraGries(5, 2)
    b.update_batch([[2], [3, 1], [4]])
    a.merge(b)
    assert a.n_users == 5 and a.n == 7 and a.build is Build.PAMG_MERGED and a.m == 2
    assert a.counters() == {1: 3, 2: 2, 3: 1, 4: 1}
    with pytest.raises(ValueError, match="different m"):
        a.merge(PrivacyAwareMisraGries(5, 3))
    with pytest.raises(ValueError):
        a.merge(PrivacyAwareMisraGries(4, 2))  # smaller k
    acc = a.merge_accumulator(7)
    assert type(acc) is PrivacyAwareMisraGries and acc.k == 7 and acc.m == 2 and acc.n_users == 0
    merged = merge_in_order([b, PrivacyAwareMisraGries(5, 2)])
    assert merged.m == 2 and merged.n_users == 3 and merged.k == 5
    # a flat batch after a merge (counters held as arrays) continues from the merged counters
    a.update_batch_flat(np.array([5, 6], dtype=np.int64), np.array([0, 2]))
    assert a.counters() == {1: 2, 2: 1} and a.n_users == 6 and a.n == 9
    c = PrivacyAwareMisraGries(5, 2)
    c.update_batch_flat(np.array([1, 2, 2], dtype=np.int64), np.array([0, 2, 3]))
    c.merge(PrivacyAwareMisraGries(5, 2))
    assert c.counters() == {1: 1, 2: 2} and c.n_users == 2


def _pamg_bytes(k: int, n: int, m: int, users: int, counters: dict, build: Build = Build.PAMG) -> bytes:
    return encode(PrivacyAwareMisraGries, [k, n, build.code, m, users], encode_counters(counters))


def test_pamg_from_bytes_checks_m_and_users() -> None:
    s = PrivacyAwareMisraGries(4, 2)
    s.update_batch([[1, 2], [1], ["q", 3]])
    back = PrivacyAwareMisraGries.from_bytes(s.to_bytes())
    assert back.m == 2 and back.n_users == 3 and back.n == 5 and back.counters() == s.counters()
    ok = PrivacyAwareMisraGries.from_bytes(_pamg_bytes(4, 6, 3, 2, {1: 2, 2: 1}))  # n = m·users, m = k−1
    assert ok.m == 3 and ok.n_users == 2 and ok.n == 6
    ok = PrivacyAwareMisraGries.from_bytes(_pamg_bytes(2, 0, 1, 0, {}))  # m = 1
    assert ok.m == 1 and ok.n_users == 0
    bad_m, too_many = "PAMG needs 1 <= m < k", "more items than m * users"
    for k, n, m, users, message in (
        (4, 7, 3, 2, too_many),
        (4, 1, 2, 0, too_many),
        (4, 2, 0, 5, bad_m),
        (4, 2, 4, 5, bad_m),
        (4, 2, 5, 5, bad_m),
    ):
        with pytest.raises(SketchFormatError, match=_exactly(message)):
            PrivacyAwareMisraGries.from_bytes(_pamg_bytes(k, n, m, users, {1: 1}))
