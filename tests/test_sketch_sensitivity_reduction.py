"""Lebeda–Tětek Alg. 3 (sensitivity reduction): exact values, Lemma 6.1 error, Lemma 6.2 ℓ1 < 2.
Note §6 item 4."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privstream.sketches import (
    Build,
    MisraGries,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    reduce_sensitivity,
    sum_reduced,
)
from tests.test_sketch_reference import textbook_mg


def alg1(k: int, stream) -> MisraGries:
    sketch = MisraGries(k)
    for x in stream:
        sketch.update(x)
    return sketch


def l1(a: dict, b: dict) -> Fraction:
    return sum((abs(a.get(x, 0) - b.get(x, 0)) for x in set(a) | set(b)), Fraction(0))


@settings(max_examples=250, deadline=None)
@given(stream=st.lists(st.integers(0, 7), max_size=40), k=st.integers(1, 5))
def test_alg3_values_error_and_sensitivity(stream: list[int], k: int) -> None:
    reduced = reduce_sensitivity(alg1(k, stream))
    counters = textbook_mg(k, stream)
    gamma = Fraction(sum(counters.values()), k + 1)
    assert reduced.denominator == k + 1
    assert reduced.values() == {x: c - gamma for x, c in sorted(counters.items()) if c > gamma}
    f = Counter(stream)
    bound = Fraction(len(stream), k + 1)
    assert reduced.error_bound == bound
    for x in set(stream) | {99}:
        assert f[x] - bound <= reduced.estimate(x) <= f[x]  # Lemma 6.1
    for i in range(len(stream)):
        other = reduce_sensitivity(alg1(k, stream[:i] + stream[i + 1 :]))
        assert l1(reduced.values(), other.values()) < 2  # Lemma 6.2


def test_alg3_accepts_standard_mg_with_identical_result_and_refuses_merged() -> None:
    stream = [1, 2, 1, 3, 1, 4, 2, 5, 1]
    a, s = alg1(3, stream), StandardMisraGries(3)
    for x in stream:
        s.update(x)
    assert reduce_sensitivity(a).numerators == reduce_sensitivity(s).numerators == {1: 7}  # 3*4 - 5
    assert reduce_sensitivity(s).source_build is Build.STANDARD_SEQUENTIAL
    a.merge(alg1(3, [1]))
    with pytest.raises(ValueError, match="sum_reduced"):
        reduce_sensitivity(a)
    with pytest.raises(ValueError):
        reduce_sensitivity(PrivacyAwareMisraGries(3, 2))


def test_sum_reduced_keeps_l1_below_two_when_one_partition_changes() -> None:
    parts = [[1, 1, 2, 3, 1], [2, 2, 4, 1, 2, 5], [3, 3, 3, 1]]
    base = sum_reduced([reduce_sensitivity(alg1(2, p)) for p in parts])
    assert base.partitions == 3 and base.n == 15 and base.error_bound == Fraction(15, 3)
    for j, p in enumerate(parts):
        for i in range(len(p)):
            changed = [q if t != j else q[:i] + q[i + 1 :] for t, q in enumerate(parts)]
            other = sum_reduced([reduce_sensitivity(alg1(2, q)) for q in changed])
            assert l1(base.values(), other.values()) < 2
    with pytest.raises(ValueError, match="k"):
        sum_reduced([reduce_sensitivity(alg1(2, [1])), reduce_sensitivity(alg1(3, [1]))])
