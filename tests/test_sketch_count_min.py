"""Count-Min sketch and the stable hashing under it."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from privstream.sketches import CountMinSketch
from privstream.sketches.hashing import MASK64, hash_int_array, hash_str_list, mix64, row_salts


def splitmix64_finaliser(z: int) -> int:
    """Pure-Python SplitMix64 finaliser (Steele, Lea, Flood 2014), the independent reference."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & MASK64
    return z ^ (z >> 31)


def test_mix64_matches_pure_python_reference() -> None:
    values = [0, 1, 2, 2**63, MASK64, 0x0123456789ABCDEF]
    got = mix64(np.array(values, dtype=np.uint64)).tolist()
    assert got == [splitmix64_finaliser(v) for v in values]


def test_hashes_are_stable_golden_values() -> None:
    """Regression guard: these values must never change (sketches merge across processes,
    machines and releases). Python's hash() would differ per process for str."""
    assert hash_int_array(np.array([0, 1, -1, 2**63 - 1]), 0).tolist() == [
        5197578548964807871,
        11385487063155714807,
        17492683508065611904,
        4136705488814653760,
    ]
    assert hash_str_list(["", "a", "é", "\ud800"], 0).tolist() == [
        3244421341483603138,
        16629034431890738719,
        17839895020865391795,
        15756832317056903632,
    ]
    assert row_salts(7, 3).tolist() == [7191089600892374487, 309689372594955804, 16616101746815609346]
    sketch = CountMinSketch(100, 3, 7)
    sketch.update_batch([1, 2, 2])
    assert {tuple(np.flatnonzero(row)) for row in sketch.table} == {(28, 90), (23, 83), (15, 46)}


def test_int_hash_depends_on_seed_and_spreads_strided_keys() -> None:
    keys = np.arange(20000, dtype=np.int64) * 64  # all equal mod 64: identity hashing would fail
    sketch = CountMinSketch(64, 3, seed=11)
    sketch.update_batch(keys)
    expected = len(keys) / 64
    sigma = math.sqrt(expected)
    # Balls into bins: each load ~ Binomial(20000, 1/64); |load - mean| > 6 sigma has probability
    # < 2e-9 per bucket, < 4e-7 for all 192 buckets under ideal hashing.
    assert np.abs(sketch.table - expected).max() < 6 * sigma
    assert not np.array_equal(hash_int_array(keys, 1), hash_int_array(keys, 2))


def zipf_items(seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).zipf(1.3, 20000) % 3000  # test data only


@pytest.mark.parametrize(("width", "depth"), [(16, 1), (64, 3)])
def test_one_sided_error_and_statistical_bound(width: int, depth: int) -> None:
    """Always estimate >= f(x). Statistical: P[estimate > f(x) + e·n/width] <= e^-depth per query
    for ideal hashes; over 10 fixed seeds x all distinct items we require the failure *fraction*
    to be <= e^-depth. The seeds are fixed so the outcome is deterministic; the observed fractions
    (0.070 for 16x1, 0.0002 for 64x3) are far below the bounds (0.37, 0.050), and by Markov's
    inequality on the mean a random seed set would fail with probability < (observed/bound)
    ≈ 0.2 resp. 0.004 even if the observed fraction were the true expectation."""
    items = zipf_items()
    f = Counter(items.tolist())
    keys = list(f)
    truth = np.array([f[x] for x in keys])
    failures = 0
    for seed in range(10):
        sketch = CountMinSketch(width, depth, seed)
        sketch.update_batch(items)
        error = sketch.estimate_batch(keys) - truth
        assert (error >= 0).all()
        bound, probability = sketch.error_bound()
        assert bound == math.e * len(items) / width and probability == math.exp(-depth)
        failures += int((error > bound).sum())
    assert failures / (10 * len(keys)) <= math.exp(-depth)


def test_sequential_batch_and_merge_agree() -> None:
    items = [3, "x", 3, -7, "y", 3, 2**62]
    one = CountMinSketch(32, 4, 99)
    for x in items:
        one.update(x)
    batch = CountMinSketch(32, 4, 99)
    batch.update_batch(items)
    left, right = CountMinSketch(32, 4, 99), CountMinSketch(32, 4, 99)
    left.update_batch(items[:3])
    right.update_batch(np.array(items[3:], dtype=object))
    left.merge(right)
    for sketch in (batch, left):
        assert np.array_equal(sketch.table, one.table) and sketch.n == one.n == len(items)
    assert one.estimate(3) >= 3 and one.estimate("x") >= 1
    assert one.estimate_batch(["x", 3, -7]).tolist() == [one.estimate("x"), one.estimate(3), one.estimate(-7)]


def test_merge_rejects_mismatched_sketches() -> None:
    base = CountMinSketch(32, 4, 1)
    for other in (CountMinSketch(31, 4, 1), CountMinSketch(32, 3, 1), CountMinSketch(32, 4, 2)):
        with pytest.raises(ValueError, match="width, depth, seed"):
            base.merge(other)
    with pytest.raises(TypeError):
        base.merge(object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "error", "name"),
    [
        ((0, 2, 1), ValueError, "width"),
        ((2**32 + 1, 1, 1), ValueError, "width"),
        ((4, 0, 1), ValueError, "depth"),
        ((4, 2, -1), ValueError, "seed"),
        ((4, 2, 2**64), ValueError, "seed"),
        ((4.0, 2, 1), TypeError, "width"),
        ((4, True, 1), TypeError, "depth"),
    ],
)
def test_constructor_rejects_bad_params(args, error, name) -> None:
    with pytest.raises(error, match=name):
        CountMinSketch(*args)


def test_from_error_and_update_validation() -> None:
    sketch = CountMinSketch.from_error(0.01, 0.001, seed=3)
    assert (sketch.width, sketch.depth) == (272, 7)
    with pytest.raises(ValueError, match="epsilon"):
        CountMinSketch.from_error(0, 0.1, 1)
    with pytest.raises(ValueError, match="delta"):
        CountMinSketch.from_error(0.1, 1.5, 1)
    with pytest.raises(TypeError):
        sketch.update(1, count=2)  # type: ignore[call-arg]  # unit weight: one item is one element
    with pytest.raises(TypeError):
        sketch.update_batch(np.array([0.5]))
    with pytest.raises(ValueError):
        sketch.table[0, 0] = 1  # read-only view
