"""PAMG (Lebeda–Tětek Alg. 4): Lemmas 8.8 / 8.9, Cor. 8.10 / Lemma 8.11, equivalence with standard
MG for singleton users, the Lemma 8.7 counterexample, batch paths and validation. Note §6 items
6 and 7."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privstream.sketches import (
    Build,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    merge_in_order,
)
from privstream.sketches.order import INT64_MIN
from tests.test_sketch_reference import (
    assert_mg_error_bound,
    assert_one_signed,
    drop_one,
    pamg_reference,
    textbook_mg,
)

M = 3
users_strategy = st.lists(st.lists(st.integers(0, 8), max_size=M, unique=True), max_size=25)
ks = st.integers(M + 1, M + 4)


def pamg(k: int, users, m: int = M) -> PrivacyAwareMisraGries:
    sketch = PrivacyAwareMisraGries(k, m)
    for u in users:
        sketch.update(u)
        assert len(sketch.counters()) <= k  # Lemma 8.8: |T| <= k after every user
    return sketch


def flat_count(users) -> Counter:
    return Counter(x for u in users for x in u)


@settings(max_examples=200, deadline=None)
@given(users=users_strategy, k=ks)
def test_lemmas_8_8_and_8_9(users, k) -> None:
    sketch = pamg(k, users)
    assert sketch.build is Build.PAMG
    assert sketch.counters() == dict(sorted(pamg_reference(k, users).items()))
    n_items = sum(len(u) for u in users)
    assert sketch.n == n_items and sketch.n_users == len(users)
    f = flat_count(users)
    for x in set(f):
        assert f[x] - n_items // (k + 1) <= sketch.estimate(x) <= f[x]  # Lemma 8.8 (floor)
    for i in range(len(users)):
        other = pamg(k, users[:i] + users[i + 1 :])
        assert_one_signed(sketch.counters(), other.counters(), k)  # Lemma 8.9: either direction


@settings(max_examples=100, deadline=None)
@given(
    streams=st.lists(users_strategy, min_size=1, max_size=3),
    k=ks,
    data=st.data(),
    batched=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_cor_8_10_merged_structure_and_lemma_8_11(streams, k, data, batched) -> None:
    """Remove one user from one stream; merge per-stream PAMG sketches (sequential or batch-updated)
    in a fixed order: one-signed unit differences on <= k keys, error <= M/(k+1)."""

    def sketch_of(users, as_batch: bool) -> PrivacyAwareMisraGries:
        if not as_batch:
            return pamg(k, users)
        s = PrivacyAwareMisraGries(k, M)
        s.update_batch(users)
        return s

    smaller = drop_one(streams, data)
    if smaller is None:
        return
    merged = merge_in_order([sketch_of(s, batched[i]) for i, s in enumerate(streams)])
    merged2 = merge_in_order([sketch_of(s, batched[i]) for i, s in enumerate(smaller)])
    assert merged.build is Build.PAMG_MERGED
    assert_one_signed(merged.counters(), merged2.counters(), k)
    all_users = [u for s in streams for u in s]
    assert_mg_error_bound(merged.counters(), flat_count(all_users), sum(map(len, all_users)), k)
    assert merged.n_users == len(all_users)


@settings(max_examples=150, deadline=None)
@given(
    stream=st.lists(st.one_of(st.integers(0, 6), st.sampled_from(["p", "q"])), max_size=50),
    k=st.integers(2, 5),
)
def test_singleton_users_equal_standard_mg(stream, k) -> None:
    sketch = pamg(k, [[x] for x in stream], m=1)
    std = StandardMisraGries(k)
    for x in stream:
        std.update(x)
    assert (
        sketch.counters()
        == std.counters()
        == dict(sorted(textbook_mg(k, stream).items(), key=lambda p: (type(p[0]) is str, p[0])))
    )


def lemma_8_7_streams(k: int, m: int, singletons: int) -> tuple[list[list[int]], list[list[int]]]:
    """k users covering elements 1..k, each exactly m times (cycling m at a time), then one user of
    m new elements (the one the neighbour removes), then ``singletons`` users {0}."""
    cycle = [1 + (i % k) for i in range(k * m)]
    first = [cycle[i * m : (i + 1) * m] for i in range(k)]
    new_user = [k + 1 + i for i in range(m)]
    tail = [[0]] * singletons
    return first + [new_user] + tail, first + tail


def test_lemma_8_7_counterexample_mg_differs_by_m_pamg_by_one() -> None:
    k, m = 4, 3
    with_user, without = lemma_8_7_streams(k, m, singletons=10)
    assert all(len(set(u)) == len(u) <= m for u in with_user)

    def flat_mg(users) -> int:
        sketch = StandardMisraGries(k)
        for u in users:
            for x in u:
                sketch.update(x)
        return sketch.estimate(0)

    assert flat_mg(with_user) - flat_mg(without) == m  # c_x - c'_x = m for MG on the flattened stream
    assert pamg(k, with_user, m).estimate(0) - pamg(k, without, m).estimate(0) == 1


@settings(max_examples=100, deadline=None)
@given(prefix=users_strategy, batch=users_strategy, k=ks)
def test_batch_paths_equal_user_by_user(prefix, batch, k) -> None:
    """Issue 9: a batch of users is Alg. 4 user by user (it used to merge the batch's histogram)."""
    a, b = pamg(k, prefix), pamg(k, prefix)
    a.update_batch(batch)
    items = np.array([x for u in batch for x in u], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(u) for u in batch], dtype=np.int64)])
    b.update_batch_flat(items, offsets)
    assert a.counters() == b.counters() and a.n == b.n and a.n_users == b.n_users == len(prefix) + len(batch)
    c = pamg(k, prefix + batch)
    assert a.counters() == c.counters() and a.n == c.n
    assert a.build is b.build is Build.PAMG


def test_user_validation() -> None:
    sketch = PrivacyAwareMisraGries(5, 2)
    with pytest.raises(ValueError, match="m=2"):
        sketch.update([1, 2, 3])
    with pytest.raises(ValueError, match="distinct"):
        sketch.update([1, 1])
    with pytest.raises(ValueError, match="distinct"):
        sketch.update_batch([[1], ["a", "a"]])
    with pytest.raises(TypeError):
        sketch.update([True])
    with pytest.raises(ValueError, match="distinct"):
        sketch.update_batch_flat(np.array([4, 2, 2]), np.array([0, 1, 3]))
    with pytest.raises(ValueError, match="distinct"):
        sketch.update_batch_flat(np.array([INT64_MIN, INT64_MIN]), np.array([0, 2]))
    with pytest.raises(ValueError, match="m=2"):
        sketch.update_batch_flat(np.array([1, 2, 3]), np.array([0, 3]))
    with pytest.raises(ValueError, match="offsets"):
        sketch.update_batch_flat(np.array([1, 2]), np.array([0, 1]))
    with pytest.raises(TypeError, match="items"):
        sketch.update_batch_flat(np.array(["a"]), np.array([0, 1]))
    assert sketch.n == 0 and sketch.n_users == 0 and sketch.build is Build.PAMG
    # 0 and INT64_MIN are legal items once per user, also in rows shorter than others
    sketch.update_batch_flat(np.array([INT64_MIN, 5, INT64_MIN, 0]), np.array([0, 2, 2, 4]))
    assert sketch.counters() == {INT64_MIN: 2, 0: 1, 5: 1} and sketch.n_users == 3


@pytest.mark.parametrize("m", [4, 16, 17, 40])
def test_flat_distinctness_check_on_both_paths(m: int) -> None:
    """Users of <= 16 items use the pairwise grid check, larger ones a lexsort."""
    sizes = [m, 1, 0, m - 1, 3]
    rng = np.random.default_rng(m)
    users = [rng.permutation(1000)[:s].tolist() for s in sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    sketch = PrivacyAwareMisraGries(m + 1, m)
    sketch.update_batch_flat(np.array([x for u in users for x in u], dtype=np.int64), offsets)
    assert sketch.n_users == len(sizes)
    for victim in (0, 3):
        bad = [list(u) for u in users]
        bad[victim][-1] = bad[victim][0]  # repeat the first item as the last one
        with pytest.raises(ValueError, match=f"user {victim} "):
            sketch.update_batch_flat(np.array([x for u in bad for x in u], dtype=np.int64), offsets)


@pytest.mark.parametrize(
    ("k", "m", "error", "name"),
    [(3, 3, ValueError, "m"), (3, 0, ValueError, "m"), (0, 1, ValueError, "k"), (4, 1.0, TypeError, "m")],
)
def test_constructor_rejects_bad_params(k, m, error, name) -> None:
    with pytest.raises(error, match=name):
        PrivacyAwareMisraGries(k, m)


def test_merge_requires_same_m_and_family() -> None:
    with pytest.raises(ValueError, match="m"):
        PrivacyAwareMisraGries(5, 2).merge(PrivacyAwareMisraGries(5, 3))
    with pytest.raises(TypeError):
        PrivacyAwareMisraGries(5, 2).merge(StandardMisraGries(5))
    with pytest.raises(ValueError, match="m"):
        merge_in_order([PrivacyAwareMisraGries(5, 2), PrivacyAwareMisraGries(5, 3)])


def test_update_is_the_per_user_step() -> None:
    """``update`` (the protocol's stream element) is one Alg. 4 step for one user's set: the third
    user overflows k = 4 keys, so every counter is decremented once (not once per item)."""
    a = PrivacyAwareMisraGries(4, 2)
    for user in ([1, 2], [2, 3], [4, 5], [1]):
        a.update(user)
    assert a.counters() == {1: 1, 2: 1} and a.n_users == 4 and a.n == 7
    assert not hasattr(a, "update_user")
    with pytest.raises(ValueError, match="m=2"):
        a.update([1, 2, 3])
