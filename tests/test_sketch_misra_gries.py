"""Misra–Gries: Lebeda–Tětek Alg. 1 (Lemma 2, Fact 1, sum identity), standard MG, batch updates
and the mergeable-summaries merge (Lemma 7.1 / Cor. 7.2). Note §6 items 1, 2, 3 and 5."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privstream.sketches import (
    Build,
    Dummy,
    MisraGries,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    merge_in_order,
)
from tests.test_sketch_reference import (
    alg1_reference,
    assert_mg_error_bound,
    assert_one_signed,
    drop_one,
    lemma2_case,
    positive_real,
    reference_merge,
    textbook_mg,
)

small_streams = st.lists(st.integers(0, 7), max_size=40)
ks = st.integers(1, 5)


def alg1(k: int, stream) -> MisraGries:
    sketch = MisraGries(k)
    for x in stream:
        sketch.update(x)
    return sketch


def standard(k: int, stream) -> StandardMisraGries:
    sketch = StandardMisraGries(k)
    for x in stream:
        sketch.update(x)
    return sketch


# ------------------------------------------------------------------ Alg. 1


@settings(max_examples=300, deadline=None)
@given(stream=small_streams, k=ks)
def test_alg1_matches_reference_and_lemma2_for_every_deletion(stream: list[int], k: int) -> None:
    """Note §6.1: for every position i, MG(k, S) and MG(k, S without S_i) satisfy Lemma 2."""
    full = alg1(k, stream)
    ref_slots, ref_alpha = alg1_reference(k, stream)
    assert dict(full.slots()) == ref_slots and full.decrements == ref_alpha
    slots = dict(full.slots())
    for i in range(len(stream)):
        lemma2_case(slots, dict(alg1(k, stream[:i] + stream[i + 1 :]).slots()), k)


def test_lemma2_both_cases_occur() -> None:
    rng = random.Random(7)
    cases = Counter()
    for _ in range(300):
        k = rng.randint(1, 4)
        stream = [rng.randint(0, 6) for _ in range(rng.randint(1, 25))]
        full = dict(alg1(k, stream).slots())
        for i in range(len(stream)):
            cases[lemma2_case(full, dict(alg1(k, stream[:i] + stream[i + 1 :]).slots()), k)] += 1
    assert cases["all_minus_one"] > 0 and cases["one_plus_one"] > 0


# Found by a seeded random search (k in 2..6, streams of 5-80 items); insertion-order eviction
# gives |T ∩ T'| = 2 < k - 2 when item 32 is deleted, while the paper's rule keeps Lemma 2.
INSERTION_ORDER_COUNTEREXAMPLE = (
    5,
    [0, 13, 7, 10, 3, 2, 5, 2, 3, 7, 13, 2, 4, 5, 3, 10, 12, 11, 10, 3, 9, 0, 9, 7, 12, 4, 10, 10, 7, 7, 7, 5,
     6, 6, 1, 3, 5, 0, 5, 1, 10, 6, 8, 11],
    32,
)  # fmt: skip


def test_insertion_order_eviction_breaks_lemma2() -> None:
    """Note §6.1: evicting the oldest zero-count key instead of the smallest violates Lemma 2."""
    k, stream, pos = INSERTION_ORDER_COUNTEREXAMPLE
    neighbour = stream[:pos] + stream[pos + 1 :]
    full = alg1_reference(k, stream, evict="insertion")[0]
    other = alg1_reference(k, neighbour, evict="insertion")[0]
    assert full == {0: 0, 5: 0, 10: 0, 8: 1, 11: 1} and other == {7: 0, 5: 0, 1: 0, 6: 0, 11: 1}
    with pytest.raises(AssertionError, match="k-2"):
        lemma2_case(full, other, k)
    paper = dict(alg1(k, stream).slots())
    for i in range(len(stream)):
        lemma2_case(paper, dict(alg1(k, stream[:i] + stream[i + 1 :]).slots()), k)


@settings(max_examples=200, deadline=None)
@given(stream=st.lists(st.one_of(st.integers(-3, 6), st.sampled_from(["a", "b", "é"])), max_size=60), k=ks)
def test_fact1_equivalence_with_textbook_mg_and_sum_identity(stream: list, k: int) -> None:
    """Note §6.2 and §6.3: estimates equal textbook MG, lie in [f - n/(k+1), f], and
    Σc = |S| - α(k+1) with α the number of Branch-2 executions."""
    sketch = alg1(k, stream)
    std = standard(k, stream)
    assert sketch.counters() == positive_real(textbook_mg(k, stream)) == std.counters()
    assert_mg_error_bound(sketch.counters(), Counter(stream), len(stream), k)
    assert sum(c for _, c in sketch.slots()) == len(stream) - sketch.decrements * (k + 1)
    assert sketch.n == std.n == len(stream)
    for x in set(stream):
        assert sketch.estimate(x) == std.estimate(x) == sketch.counters().get(x, 0)


def test_slots_keep_dummies_and_zero_keys_in_total_order() -> None:
    sketch = alg1(4, [5, "z", 5])
    assert sketch.slots() == [(5, 2), ("z", 1), (Dummy(2), 0), (Dummy(3), 0)]
    assert sketch.counters() == {5: 2, "z": 1}
    assert sketch.estimate(np.int64(5)) == 2 and sketch.estimate(6) == 0


def test_alg1_long_stream_matches_reference_with_many_stale_heap_entries() -> None:
    rng = random.Random(3)
    stream = [rng.choice(range(40)) if rng.random() < 0.5 else rng.randint(0, 3) for _ in range(20000)]
    assert dict(alg1(8, stream).slots()) == alg1_reference(8, stream)[0]


# ------------------------------------------------------------------ batch updates


@settings(max_examples=200, deadline=None)
@given(stream=small_streams, cuts=st.lists(st.integers(0, 40), max_size=8), k=ks, as_array=st.booleans())
def test_batch_update_equals_item_by_item_whatever_the_cuts(stream, cuts, k, as_array) -> None:
    """Issue 9: update_batch is per-event semantics, so neither the sketch nor its build depends on
    where the stream is cut into batches (count-cut batches used to merge histograms: MERGED)."""
    sequential = alg1(k, stream)
    batched = MisraGries(k)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part = stream[lo:hi]
        batched.update_batch(np.array(part, dtype=np.int64) if as_array else part)
    assert batched.build is Build.ALG1_SEQUENTIAL
    assert batched.slots() == sequential.slots() and batched.decrements == sequential.decrements
    assert batched.n == len(stream)
    std_seq, std_batch = standard(k, stream), StandardMisraGries(k)
    for lo, hi in zip(bounds, bounds[1:], strict=False):  # the inlined int loop (issue 25), cut anywhere
        part = stream[lo:hi]
        std_batch.update_batch(np.array(part, dtype=np.int64) if as_array else part)
    assert std_batch.build is Build.STANDARD_SEQUENTIAL and std_batch.counters() == std_seq.counters()
    assert std_batch.n == std_seq.n == len(stream) and std_batch.to_bytes() == std_seq.to_bytes()


@settings(max_examples=100, deadline=None)
@given(before=small_streams, stream=small_streams, k=ks, start=st.sampled_from(["str", "merged", "restored"]))
def test_standard_int_batch_continues_any_state_like_the_item_loop(before, stream, k, start) -> None:
    """The inlined int loop of StandardMisraGries.update_batch starts from any state the item loop
    can: str keys stored, counters held as a merged summary, a restored sketch."""

    def initial() -> StandardMisraGries:
        sketch = StandardMisraGries(k)
        if start == "str":
            for x in ["a", *before, "b", "a"]:
                sketch.update(x)
        elif start == "merged":
            sketch.merge(standard(k, before))
        else:
            sketch = StandardMisraGries.from_bytes(standard(k, before).to_bytes())
        return sketch

    looped, batched = initial(), initial()
    for x in stream:
        looped.update(x)
    batched.update_batch(np.array(stream, dtype=np.int64))
    assert batched.counters() == looped.counters() and batched.n == looped.n
    assert batched.to_bytes() == looped.to_bytes() and batched.build is looped.build


@pytest.mark.parametrize(
    "batch",
    [
        np.array([3, 3, 0, 7, 3], dtype=np.uint16),
        np.array([-5, -5, 2, 2**40], dtype=np.int64),  # offset path is skipped: range too large -> unique
        np.array([-(2**63), 2**63 - 1, -(2**63)], dtype=np.int64),
        np.array([-3, -1, -3, 0], dtype=np.int32),  # negative values -> offset bincount
        np.array(["b", "a", "b", "é"]),
        np.array(["b", 1, "b", np.int64(1)], dtype=object),
        ["x", "y", "x"],
        (1, "1", 1),
        [np.int64(4), 4, 5],
    ],
)
def test_every_histogram_path_counts_exactly(batch) -> None:
    sketch = StandardMisraGries(10)
    sketch.update_batch(batch)
    expected = Counter(int(x) if isinstance(x, int | np.integer) else str(x) for x in list(batch))
    assert sketch.counters() == dict(expected) and sketch.n == len(batch)


@pytest.mark.parametrize(
    ("batch", "error"),
    [
        ([1, True], TypeError),
        (np.array([True, False]), TypeError),
        (np.array([1.0, 2.0]), TypeError),
        ([1.5], TypeError),
        ([2**70], ValueError),
        (np.array([2**64 - 1], dtype=np.uint64), ValueError),
    ],
)
def test_batch_rejects_bad_items(batch, error) -> None:
    with pytest.raises(error):
        StandardMisraGries(3).update_batch(batch)


def test_empty_batch_changes_nothing() -> None:
    """The build must not depend on the data (an empty batch vs a one-item batch)."""
    sketch = MisraGries(3)
    sketch.update_batch([])
    sketch.update_batch(np.zeros(0, dtype=np.int64))
    assert sketch.build is Build.ALG1_SEQUENTIAL and sketch.counters() == {} and sketch.n == 0
    assert sketch.slots() == MisraGries(3).slots()
    sketch.update_batch([5])
    assert sketch.build is Build.ALG1_SEQUENTIAL


def test_sequential_updates_after_merge_are_standard_mg_steps() -> None:
    sketch = alg1(2, [1, 1, 2])
    sketch.merge(standard(2, [3]))
    assert sketch.counters() == {1: 1}
    for x in [4, 4, 5]:
        sketch.update(x)
    assert sketch.counters() == reference_merge(reference_merge({1: 1, 4: 2}, {}, 2), {5: 1}, 2)
    assert sketch.build is Build.MERGED


# ------------------------------------------------------------------ merging (Cor. 7.2)


@settings(max_examples=120, deadline=None)
@given(
    streams=st.lists(small_streams, min_size=1, max_size=4),
    k=ks,
    data=st.data(),
    kinds=st.lists(st.sampled_from(["alg1", "standard", "batch"]), min_size=4, max_size=4),
)
def test_merge_structure_for_a_fixed_order(streams, k, data, kinds) -> None:
    """Note §6.5: remove one element from one stream; merged counters differ by {0,+1} or {0,-1}
    everywhere, on at most k keys, and estimates stay within [f - N/(k+1), f]."""

    def build(kind: str, stream: list[int]):
        if kind == "batch":  # a batch is the sequential Alg. 1 sketch (docs/privacy.md)
            sketch = MisraGries(k)
            sketch.update_batch(stream)
            assert sketch.build is Build.ALG1_SEQUENTIAL
            return sketch
        return alg1(k, stream) if kind == "alg1" else standard(k, stream)

    smaller = drop_one(streams, data)
    if smaller is None:
        return
    merged = merge_in_order([build(kinds[i], s) for i, s in enumerate(streams)])
    merged2 = merge_in_order([build(kinds[i], s) for i, s in enumerate(smaller)])
    assert merged.build is Build.MERGED
    assert_one_signed(merged.counters(), merged2.counters(), k)
    everything = [x for s in streams for x in s]
    assert_mg_error_bound(merged.counters(), Counter(everything), len(everything), k)
    expected: dict = {}
    for s in streams:  # every kind is a sequential sketch with textbook MG's counters (Fact 1)
        expected = reference_merge(expected, reference_merge({}, textbook_mg(k, s), k), k)
    assert merged.counters() == expected


def test_merge_in_place_and_parameter_checks() -> None:
    a, b = alg1(3, [1, 1, 2]), standard(4, [2, 3, 4, 5, 5])
    a.merge(b)
    assert a.build is Build.MERGED and a.n == 8
    assert a.counters() == reference_merge({1: 2, 2: 1}, textbook_mg(4, [2, 3, 4, 5, 5]), 3)
    with pytest.raises(ValueError, match="k"):
        b.merge(MisraGries(2))
    with pytest.raises(TypeError):
        a.merge(PrivacyAwareMisraGries(3, 2))
    with pytest.raises(ValueError, match="k"):
        merge_in_order([MisraGries(2), MisraGries(3)])
    assert merge_in_order([MisraGries(2), MisraGries(3)], k=2).k == 2
    with pytest.raises(ValueError, match="k"):
        merge_in_order([MisraGries(2)], k=3)
    with pytest.raises(ValueError, match="empty"):
        merge_in_order([])
    single = merge_in_order([alg1(2, [1, 2, 3, 1])])
    assert single.build is Build.MERGED and single.counters() == {1: 1}


@pytest.mark.parametrize("cls", [MisraGries, StandardMisraGries])
@pytest.mark.parametrize(
    ("k", "error"), [(0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_constructor_rejects_bad_k(cls, k, error) -> None:
    with pytest.raises(error, match="k"):
        cls(k)


def test_update_rejects_bad_items() -> None:
    sketch = MisraGries(2)
    for bad in (True, 1.0, None, b"x", 2**63):
        with pytest.raises((TypeError, ValueError), match="item"):
            sketch.update(bad)
    assert sketch.n == 0


op_strategy = st.one_of(
    st.tuples(st.just("update"), st.integers(0, 6)),
    st.tuples(st.just("batch"), st.lists(st.integers(0, 9), max_size=12)),
    st.tuples(st.just("merge"), st.lists(st.integers(0, 9), max_size=12)),
    st.tuples(st.just("estimate"), st.integers(0, 9)),
)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(op_strategy, max_size=25), k=ks, cls=st.sampled_from([MisraGries, StandardMisraGries]))
def test_interleaved_updates_batches_merges_and_queries_match_a_dict_model(ops, k, cls) -> None:
    """The counters may sit in a numpy summary after a batch/merge and in a dict after sequential
    updates; any interleaving must match a plain-dict model of standard MG + the merge."""
    sketch, model = cls(k), {}
    for op, arg in ops:
        if op == "update":
            sketch.update(arg)
            model = textbook_mg(k, [arg], start=model)
        elif op == "batch":
            sketch.update_batch(np.array(arg, dtype=np.int64))
            model = textbook_mg(k, arg, start=model)  # item by item (Fact 1 for Alg. 1)
        elif op == "merge":
            other = standard(k, arg)
            sketch.merge(other)
            model = reference_merge(model, textbook_mg(k, arg), k)
        else:
            assert sketch.estimate(arg) == model.get(arg, 0)
        assert sketch.counters() == dict(sorted(model.items()))
