"""Lebeda–Tětek Alg. 1 in privstream's two representations — the compiled kernel over arrays
(:func:`~privstream.sketches.kernels.alg1_run`) and the item-by-item dict path — and the switches
between them, each against the naive reference of tests/test_sketch_reference.py.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py sketches``): the kernel's
state carried from one batch to the next (its zero list and position), its skip over zero slots
that were incremented since the last decrement, and the paths that switch representation (a str
key stored, str items in a batch, a sketch restored from bytes). The sensitivity the releases rely
on (Lemma 2) is a property of exactly these slots. Deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from privstream.sketches import MisraGries
from privstream.sketches.order import Dummy
from tests.test_sketch_reference import alg1_reference


def _slots(sketch: MisraGries) -> dict:
    return dict(sketch.slots())


def _check(sketch: MisraGries, k: int, stream: list) -> None:
    slots, decrements = alg1_reference(k, stream)
    assert _slots(sketch) == slots
    assert sketch.decrements == decrements
    assert sketch.n == len(stream)


def test_the_kernel_skips_every_zero_slot_incremented_since_the_decrement() -> None:
    """k = 3: 1, 2, 3 fill the slots, 4 decrements all (zeros 1, 2, 3), 1 and 2 come back (Branch 1
    on zero-count keys), so 5 must skip both and evict 3, the only zero left."""
    stream = [1, 2, 3, 4, 1, 2, 5]
    sketch = MisraGries(3)
    sketch.update_batch(np.array(stream, dtype=np.int64))
    assert _slots(sketch) == {1: 1, 2: 1, 5: 1}
    _check(sketch, 3, stream)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_cut_anywhere_continue_the_kernel_state(seed: int) -> None:
    """A skewed stream over few keys (many decrements and evictions) fed as batches of 1 to 9 items:
    each batch starts from the previous one's zero list and position, so the slots and the
    decrement count are the reference's after every batch."""
    rng = np.random.default_rng(seed)
    k = 5
    stream = [int(x) for x in rng.integers(0, 12, 400)]
    sketch = MisraGries(k)
    at = 0
    while at < len(stream):
        size = int(rng.integers(1, 10))
        sketch.update_batch(np.array(stream[at : at + size], dtype=np.int64))
        at += size
        _check(sketch, k, stream[:at])
    assert sketch.decrements > 10


def test_a_stored_str_key_sends_int_batches_item_by_item() -> None:
    """Once a str key is stored the slots cannot be int arrays: an int batch then runs item by item,
    with the same result as the reference."""
    k = 4
    head = ["a", 1, "b", 2, "a", 3, 4, 5, "c"]
    tail = [1, 1, 2, 6, 7, 1, 8, 9, 2, 2, 10]
    sketch = MisraGries(k)
    for x in head:
        sketch.update(x)
    sketch.update_batch(np.array(tail, dtype=np.int64))
    _check(sketch, k, head + tail)


def test_a_batch_of_str_items_is_alg1_item_by_item() -> None:
    k = 3
    stream = ["x", "y", "z", "w", "x", "y", "v", "x", "u", "t", "x"]
    sketch = MisraGries(k)
    sketch.update_batch(np.array([1, 2], dtype=np.int64))
    sketch.update_batch(stream)
    _check(sketch, k, [1, 2, *stream])


@pytest.mark.parametrize("keys", ["str", "int"])
def test_a_restored_sketch_continues_alg1(keys: str) -> None:
    """``from_bytes`` of a sketch holding str keys (the dict path, its zero-key heap not yet built)
    or only int keys (arrays), then more items one by one and in a batch: the reference's slots."""
    k = 4
    rng = np.random.default_rng(7)
    values = [int(x) for x in rng.integers(0, 9, 120)]
    stream = [f"s{v}" for v in values] if keys == "str" else values
    cut = 50
    first = MisraGries(k)
    for x in stream[:cut]:
        first.update(x)
    restored = MisraGries.from_bytes(first.to_bytes())
    for x in stream[cut:90]:
        restored.update(x)
    restored.update_batch(stream[90:])
    _check(restored, k, stream)


def test_batches_after_a_restore_keep_the_zero_list_the_last_decrement_made() -> None:
    """k = 4, restored with one zero slot (key 4): batch [6, 7, 8] evicts 4, decrements (zeros
    1, 2, 3, 6) and evicts 1; the next batch [9] must evict 2, the next zero of that list — not
    decrement again because the restored sketch had a single zero."""
    head = [1, 2, 3, 4, 5, 1, 2, 3]
    first = MisraGries(4)
    for x in head:
        first.update(x)
    assert sum(1 for _, c in first.slots() if c == 0) == 1
    restored = MisraGries.from_bytes(first.to_bytes())
    restored.update_batch(np.array([6, 7, 8], dtype=np.int64))
    restored.update_batch(np.array([9], dtype=np.int64))
    assert _slots(restored) == {3: 0, 6: 0, 8: 1, 9: 1}
    _check(restored, 4, [*head, 6, 7, 8, 9])


def test_an_int_batch_after_item_by_item_updates_keeps_the_dummies() -> None:
    """k = 4: one item by item (the dict path: three Dummy slots left), then an int batch: the dict
    becomes the kernel's arrays with the dummies marked as dummies (Dummy(j) is not the int j)."""
    sketch = MisraGries(4)
    sketch.update(5)
    sketch.update_batch(np.array([7], dtype=np.int64))
    _check(sketch, 4, [5, 7])  # Dummy(2), Dummy(3) still at 0: not the int keys 2, 3
    tail = [1, 2, 1, 0, 7, 8, 1, 9]
    sketch.update_batch(np.array(tail, dtype=np.int64))
    _check(sketch, 4, [5, 7, *tail])


def test_zero_slots_in_decreasing_key_order_are_evicted_smallest_key_first() -> None:
    """k = 2 item by item: 5, 3 fill the slots (in that order), 7 decrements both to 0, so the dict
    holds the zero keys as 5, 3. A batch [9] must evict 3 (Alg. 1 evicts the smallest zero-count
    key), whatever order the slots are stored in."""
    sketch = MisraGries(2)
    for x in (5, 3, 7):
        sketch.update(x)
    sketch.update_batch(np.array([9], dtype=np.int64))
    assert _slots(sketch) == {5: 0, 9: 1}
    _check(sketch, 2, [5, 3, 7, 9])


def test_an_int_batch_after_only_str_keys_is_alg1_item_by_item() -> None:
    """Every slot holds a str key (no dummy left): an int batch cannot use the int kernel."""
    sketch = MisraGries(2)
    for x in ("a", "b", "a"):
        sketch.update(x)
    sketch.update_batch(np.array([1, 2, 1, 3], dtype=np.int64))
    _check(sketch, 2, ["a", "b", "a", 1, 2, 1, 3])


def _universe_order(slots: dict) -> list:
    """The slots as PMG (Alg. 2) reads them, written out from privstream's universe order (ints
    numerically < strs by code point < Dummy(0) < Dummy(1) < ...): independent of the sketch."""
    ints = sorted((x, c) for x, c in slots.items() if type(x) is int)
    strs = sorted((x, c) for x, c in slots.items() if type(x) is str)
    dummies = sorted(((x, c) for x, c in slots.items() if type(x) is Dummy), key=lambda p: p[0].index)
    return ints + strs + dummies


@pytest.mark.parametrize("path", ["arrays", "dict"])
@pytest.mark.parametrize("seed", [3, 4])
def test_slots_are_every_slot_in_the_universe_order(path: str, seed: int) -> None:
    """``slots()`` lists all k slots — zero counts and the dummies left included — in the universe's
    total order, from the kernel's arrays (whose slot order is arbitrary: keys arrive unsorted) and
    from the dict path: exactly the reference's slots in the order written out above. PMG noises
    the slots in this order, so a slot lost, a dummy shown as the int of its index, or an order
    that depends on arrival would change the release."""
    rng = np.random.default_rng(seed)
    k = 7
    stream = [int(x) for x in rng.permutation(40)[:5]] + [int(x) for x in rng.integers(-20, 60, 60)]
    for cut in (3, 5, len(stream)):  # dummies left (3, 5 distinct keys seen) and a full sketch
        sketch = MisraGries(k)
        if path == "arrays":
            sketch.update_batch(np.array(stream[:cut], dtype=np.int64))
        else:
            for x in stream[:cut]:
                sketch.update(x)
        reference, _ = alg1_reference(k, stream[:cut])
        slots = sketch.slots()
        assert len(slots) == k
        assert slots == _universe_order(reference)
        assert [type(x) for x, _ in slots] == [type(x) for x, _ in _universe_order(reference)]


def test_slots_of_a_batch_in_decreasing_key_order_are_sorted() -> None:
    """Keys stored in decreasing order (slot order = arrival order 9, 5, 2) and dummies 3..5 left:
    the arrays' real and dummy parts are each sorted before they are listed."""
    sketch = MisraGries(6)
    sketch.update_batch(np.array([9, 5, 2, 5], dtype=np.int64))
    assert sketch.slots() == [(2, 1), (5, 2), (9, 1), (Dummy(3), 0), (Dummy(4), 0), (Dummy(5), 0)]


def test_slots_with_str_keys_put_ints_before_strs_before_dummies() -> None:
    sketch = MisraGries(5)
    for x in ("b", 7, "a", -3):
        sketch.update(x)
    assert sketch.slots() == [(-3, 1), (7, 1), ("a", 1), ("b", 1), (Dummy(4), 0)]


def test_slots_refuse_a_merged_sketch() -> None:
    """A merged sketch has no Alg. 1 slots (Lemma 2 does not hold for it): PMG must not read them."""
    a, b = MisraGries(3), MisraGries(3)
    a.update_batch(np.array([1, 2], dtype=np.int64))
    b.update_batch(np.array([2, 3], dtype=np.int64))
    a.merge(b)
    with pytest.raises(ValueError, match="slots\\(\\) needs an Alg. 1 sketch built sequentially"):
        a.slots()
