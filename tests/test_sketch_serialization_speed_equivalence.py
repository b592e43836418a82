"""The vectorised state paths of the Misra–Gries sketches against the slow (dict) paths.

A streaming shard stores its Lebeda–Tětek Alg. 1 sketch as bytes and runs ``from_bytes`` →
``update_batch`` → ``to_bytes`` per message. For int keys these now stay in numpy arrays
(:class:`~privstream.sketches.kernels.Alg1Arrays`, :class:`~privstream.sketches.histogram.Counts`):
these tests pin that the bytes, counters, slots and the restore checks (k slots, Σ slots =
n − α(k+1), dummies a suffix, exactly the dummies at 0 while one is left — the reachable states of
Alg. 1 whose neighbours Lemma 2 describes) are exactly those of the dict paths, and that the
per-message cycle equals Alg. 1 item by item."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from privstream.sketches import (
    Build,
    Counts,
    Dummy,
    MisraGries,
    PrivacyAwareMisraGries,
    SketchFormatError,
    StandardMisraGries,
    item_order_key,
    merge_in_order,
)
from privstream.sketches.binary_format import decode_counters, encode, encode_counters
from privstream.sketches.counter_sketch import CounterSketch
from tests.test_sketch_reference import reference_merge

K_VALUES = [1, 2, 7, 512, 4096]


# ------------------------------------------------------------------ slow references


def reference_payload(counters: Mapping) -> bytes:
    """The counter payload exactly as the dict path wrote it before the array paths (a copy)."""
    pairs = sorted(counters.items(), key=lambda p: item_order_key(p[0]))
    ints = [(x, c) for x, c in pairs if type(x) is int]
    strs = [(x.encode("utf-8", "surrogatepass"), c) for x, c in pairs if type(x) is str]
    dummies = [(x.index, c) for x, c in pairs if type(x) is Dummy]
    u32 = np.dtype("<u4")
    return b"".join(
        [
            np.array([len(ints)], dtype=u32).tobytes(),
            np.array([x for x, _ in ints], dtype="<i8").tobytes(),
            np.array([c for _, c in ints], dtype="<i8").tobytes(),
            np.array([len(strs)], dtype=u32).tobytes(),
            np.array([len(s) for s, _ in strs], dtype=u32).tobytes(),
            *(s for s, _ in strs),
            np.array([c for _, c in strs], dtype="<i8").tobytes(),
            np.array([len(dummies)], dtype=u32).tobytes(),
            np.array([i for i, _ in dummies], dtype=u32).tobytes(),
            np.array([c for _, c in dummies], dtype="<i8").tobytes(),
        ]
    )


def alg1_bytes(k: int, n: int, alpha: int, slots: Mapping, build: Build = Build.ALG1_SEQUENTIAL) -> bytes:
    return encode(MisraGries, [k, n, build.code, alpha], reference_payload(slots))


def reference_bytes(sketch: CounterSketch) -> bytes:
    """The sketch's bytes from its dict state (``_read``) and the reference payload."""
    return encode(
        type(sketch),
        [sketch.k, sketch.n, sketch.build.code, *sketch._extra_params()],
        reference_payload(dict(sketch._read())),
    )


def sequential(k: int, stream: list[int]) -> MisraGries:
    """Alg. 1 item by item through ``update`` (the dict + zero-key-heap path)."""
    sketch = MisraGries(k)
    for x in stream:
        sketch.update(x)
    return sketch


def dict_slots(sketch: MisraGries) -> list:
    """``slots()`` computed from the dict state."""
    return sorted(sketch._read().items(), key=lambda p: item_order_key(p[0]))


def stream_for(k: int, seed: int, length_factor: float) -> list[int]:
    rng = np.random.default_rng(seed)
    length = max(1, int(length_factor * (k + 1)))
    return (rng.zipf(1.3, length) % (3 * k + 5) - k // 2).tolist()


def messages(stream: list[int], seed: int) -> list[np.ndarray]:
    rng = random.Random(seed)
    out, at = [], 0
    while at < len(stream):
        size = rng.choice([1, 3, 100, 1000, rng.randint(1, 1000)])
        out.append(np.array(stream[at : at + size], dtype=np.int64))
        at += size
    return out


def outcome(load: Callable[[bytes], object], data: bytes) -> tuple:
    """``("ok", bytes again)`` or ``("error", message)``."""
    try:
        sketch = load(data)
    except SketchFormatError as exc:
        return ("error", str(exc))
    return ("ok", sketch.to_bytes())  # type: ignore[attr-defined]


@pytest.fixture
def slow_restore(monkeypatch: pytest.MonkeyPatch) -> Callable[[bytes], MisraGries]:
    """``MisraGries.from_bytes`` forced through the dict restore and its dict checks."""

    def load(data: bytes) -> MisraGries:
        with monkeypatch.context() as m:
            m.setattr(MisraGries, "_restore_slots", CounterSketch._restore_slots)
            sketch = MisraGries.from_bytes(data)
        assert sketch._arrays is None and sketch._counters is not None
        return sketch

    return load


# ------------------------------------------------------------------ Alg. 1: bytes and queries


@pytest.mark.parametrize("k", K_VALUES)
@pytest.mark.parametrize(("seed", "length_factor"), [(1, 0.4), (2, 3.0), (3, 12.0)])
def test_per_message_cycle_equals_alg1_item_by_item(k: int, seed: int, length_factor: float) -> None:
    """from_bytes → update_batch → to_bytes per message gives the bytes of Alg. 1 run item by item
    (dict path), which equal the reference encoding of its slots; the restored state is arrays."""
    stream = stream_for(k, seed, length_factor)
    ref = sequential(k, stream)
    data = MisraGries(k).to_bytes()
    assert data == reference_bytes(MisraGries(k))
    for msg in messages(stream, seed):
        sketch = MisraGries.from_bytes(data)
        assert sketch._arrays is not None and sketch._counters is None  # the vectorised restore
        sketch.update_batch(msg)
        data = sketch.to_bytes()
    assert data == ref.to_bytes() == reference_bytes(ref)
    final = MisraGries.from_bytes(data)
    assert final.to_bytes() == data
    assert final.slots() == ref.slots() == dict_slots(ref)
    assert final.counters() == ref.counters()
    assert list(final.counters()) == sorted(final.counters())
    assert (final.n, final.decrements, final.build) == (ref.n, ref.decrements, Build.ALG1_SEQUENTIAL)
    for x in stream[:50]:
        assert final.estimate(x) == ref.estimate(x)


@pytest.mark.parametrize("k", K_VALUES)
def test_fast_and_slow_restore_give_the_same_sketch(k: int, slow_restore) -> None:
    for seed, factor in [(4, 0.0), (5, 0.5), (6, 5.0)]:
        ref = sequential(k, stream_for(k, seed, factor) if factor else [])
        data = ref.to_bytes()
        fast, slow = MisraGries.from_bytes(data), slow_restore(data)
        assert fast._arrays is not None
        assert fast.to_bytes() == slow.to_bytes() == data
        assert fast.slots() == slow.slots() == dict_slots(slow)
        assert fast.counters() == slow.counters()
        more = stream_for(k, seed + 10, 2.0)
        fast.update_batch(np.array(more, dtype=np.int64))
        for x in more[:200]:
            slow.update(x)
        for x in more[200:]:
            slow.update(x)
        assert fast.to_bytes() == slow.to_bytes()


@pytest.mark.parametrize("k", K_VALUES)
def test_queries_on_arrays_equal_queries_on_the_dict(k: int) -> None:
    sketch = MisraGries(k)
    sketch.update_batch(np.array(stream_for(k, 7, 4.0), dtype=np.int64))
    assert sketch._arrays is not None
    fast_slots, fast_counters = sketch.slots(), sketch.counters()
    state = dict(sketch._read())  # the dict the item-by-item path would use
    assert fast_slots == sorted(state.items(), key=lambda p: item_order_key(p[0]))
    assert fast_counters == {
        x: c for x, c in sorted(state.items(), key=lambda p: item_order_key(p[0])) if type(x) is int and c > 0
    }
    assert sketch.to_bytes() == reference_bytes(sketch)
    assert len(fast_slots) == k and sum(c for _, c in fast_slots) == sketch.n - sketch.decrements * (k + 1)


def test_fresh_sketch_is_k_dummies_at_zero() -> None:
    for k in K_VALUES:
        sketch = MisraGries(k)
        assert sketch.slots() == [(Dummy(i), 0) for i in range(k)]
        assert sketch.to_bytes() == alg1_bytes(k, 0, 0, {Dummy(i): 0 for i in range(k)})
        sketch.update(3)  # the item path starts from the same state
        assert sketch.slots() == [(3, 1), *((Dummy(i), 0) for i in range(1, k))]


def test_str_keys_keep_the_dict_path() -> None:
    sketch = MisraGries(4)
    sketch.update_batch([1, "a", 2, 2])
    data = sketch.to_bytes()
    again = MisraGries.from_bytes(data)
    assert again._arrays is None and again.to_bytes() == data == reference_bytes(sketch)
    again.update_batch(np.array([5, 6, 7, 1], dtype=np.int64))
    sketch.update_batch([5, 6, 7, 1])
    assert again.to_bytes() == sketch.to_bytes()


# ------------------------------------------------------------------ Alg. 1: restore checks


def corruptions(k: int, n: int, alpha: int, slots: dict) -> list[tuple[str, int, int, dict, str]]:
    """Targeted invalid states of a valid (k, n, α, slots): (name, n, α, slots, expected message)."""
    out = []
    reals = sorted((x for x in slots if type(x) is int), key=item_order_key)
    dummies = sorted(x.index for x in slots if type(x) is Dummy)
    last = max(slots, key=item_order_key)
    fewer = {x: c for x, c in slots.items() if x != last}
    out.append(("one slot missing", n - slots[last], alpha, fewer, "exactly k slots"))
    extra = max(reals, default=0) + 1
    out.append(("one slot too many", n, alpha, {**slots, extra: 0}, "exactly k slots"))
    out.append(("sum identity", n + 1, alpha, slots, "sum identity"))
    if alpha > 0:
        out.append(("sum identity with α", n + k, alpha, slots, "sum identity"))
    if dummies:
        j = dummies[0]
        moved = {x: c for x, c in slots.items() if x != Dummy(k - 1)}
        moved[Dummy(k)] = 0
        out.append(("dummy beyond k", n, alpha, moved, "suffix"))
        if j >= 1:
            gap = {x: c for x, c in slots.items() if x != Dummy(j)}
            gap[Dummy(j - 1)] = 0
            if len(dummies) > 1 or j >= 2:
                out.append(("dummy not a suffix", n, alpha, gap, "suffix"))
        if reals:
            x = reals[0]
            out.append(("a real key at 0", n - slots[x], alpha, {**slots, x: 0}, "exactly the dummies"))
        counted = {**slots, Dummy(dummies[-1]): 1}
        out.append(("a dummy counted", n + 1, alpha, counted, "exactly the dummies"))
        out.append(("decremented with dummies", n + k + 1, 1, slots, "never decremented"))
    elif reals:
        x = reals[-1]
        swapped = {y: c for y, c in slots.items() if y != x}
        swapped[Dummy(0)] = slots[x]
        if k >= 2:
            out.append(("a dummy appears", n, alpha, swapped, "suffix"))
    return out


@pytest.mark.parametrize("k", K_VALUES)
@pytest.mark.parametrize("factor", [0.0, 0.5, 3.0])
def test_restore_rejects_the_states_alg1_cannot_reach(k: int, factor: float, slow_restore) -> None:
    ref = sequential(k, stream_for(k, 11, factor) if factor else [])
    slots, n, alpha = dict(ref.slots()), ref.n, ref.decrements
    assert outcome(MisraGries.from_bytes, alg1_bytes(k, n, alpha, slots)) == ("ok", ref.to_bytes())
    cases = corruptions(k, n, alpha, slots)
    assert cases
    for name, bad_n, bad_alpha, bad_slots, message in cases:
        data = alg1_bytes(k, bad_n, bad_alpha, bad_slots)
        fast = outcome(MisraGries.from_bytes, data)
        assert fast[0] == "error" and message in fast[1], (name, fast)
        assert fast == outcome(slow_restore, data), name


@pytest.mark.parametrize("k", K_VALUES)
def test_random_mutations_get_the_same_verdict_fast_and_slow(k: int, slow_restore) -> None:
    """Small random edits of valid states: the vectorised checks accept and reject exactly what the
    dict checks do, with the same message."""
    rng = random.Random(k)
    verdicts = set()
    for factor in (0.0, 0.3, 0.9, 4.0):
        ref = sequential(k, stream_for(k, 20 + k, factor) if factor else [])
        base = dict(ref.slots())
        for _ in range(40):
            slots, n, alpha = dict(base), ref.n, ref.decrements
            for _ in range(rng.randint(1, 3)):
                what = rng.randrange(6)
                if not slots:
                    slots[rng.randrange(-5, 3 * k)] = rng.randrange(3)
                    continue
                key = rng.choice(list(slots))
                if what == 0:
                    slots[key] = max(0, slots[key] + rng.choice([-1, 1]))
                elif what == 1:
                    n = max(0, n + rng.choice([-1, 1, k + 1]))
                elif what == 2:
                    alpha = max(0, alpha + rng.choice([-1, 1]))
                elif what == 3:
                    slots[Dummy(rng.randrange(k + 1))] = slots.pop(key)
                elif what == 4:
                    slots[rng.randrange(-5, 3 * k)] = slots.pop(key)
                else:
                    slots.pop(key)
            data = alg1_bytes(k, n, alpha, slots)
            fast = outcome(MisraGries.from_bytes, data)
            assert fast == outcome(slow_restore, data)
            verdicts.add(fast[0])
    assert verdicts == {"ok", "error"}


def test_payload_checks_shared_by_both_paths(slow_restore) -> None:
    """Duplicates, negative counts and sums above n are rejected before the Alg. 1 checks; a
    payload in non-canonical order is accepted and re-encoded canonically, as before."""
    k = 3
    good = {5: 2, -1: 1, Dummy(2): 0}
    canonical = alg1_bytes(k, 3, 0, good)
    payload = reference_payload(good)
    # swap the two int keys (and their counts) in the payload: same content, unsorted
    keys = np.frombuffer(payload[4:20], dtype="<i8")[::-1]
    counts = np.frombuffer(payload[20:36], dtype="<i8")[::-1]
    unsorted = payload[:4] + keys.tobytes() + counts.tobytes() + payload[36:]
    assert decode_counters(unsorted) == good
    data = encode(MisraGries, [k, 3, Build.ALG1_SEQUENTIAL.code, 0], unsorted)
    assert outcome(MisraGries.from_bytes, data) == outcome(slow_restore, data) == ("ok", canonical)
    duplicate_int = payload[:4] + np.array([5, 5], "<i8").tobytes() + payload[20:]
    # {1: 1} with its (empty) dummy part replaced by Dummy(1), Dummy(1)
    duplicate_dummy = b"".join(
        [
            reference_payload({1: 1})[:-4],
            np.array([2, 1, 1], "<u4").tobytes(),
            np.zeros(2, "<i8").tobytes(),
        ]
    )
    for bad in (duplicate_int, duplicate_dummy):
        data = encode(MisraGries, [k, 3, Build.ALG1_SEQUENTIAL.code, 0], bad)
        with pytest.raises(SketchFormatError, match="duplicate"):
            MisraGries.from_bytes(data)
    negative = alg1_bytes(k, 3, 0, {5: 4, -1: -1, Dummy(2): 0})
    above_n = alg1_bytes(k, 2, 0, good)
    for bad in (negative, above_n):
        fast, slow = outcome(MisraGries.from_bytes, bad), outcome(slow_restore, bad)
        assert fast == slow and fast[0] == "error" and ">= 0 and sum to <= n" in fast[1]


# ------------------------------------------------------------------ merged / standard / PAMG


@pytest.mark.parametrize("k", K_VALUES)
def test_merge_of_array_shards_equals_merge_of_dict_shards(k: int) -> None:
    stream = stream_for(k, 31, 6.0)
    shards = [stream[i::4] for i in range(4)]
    fast_shards = []
    for part in shards:
        data = MisraGries(k).to_bytes()
        for msg in messages(part, k):
            s = MisraGries.from_bytes(data)
            s.update_batch(msg)
            data = s.to_bytes()
        fast_shards.append(MisraGries.from_bytes(data))
    slow_shards = [sequential(k, part) for part in shards]
    fast, slow = merge_in_order(fast_shards), merge_in_order(slow_shards)
    expected: dict = {}
    for s in slow_shards:
        expected = reference_merge(expected, s.counters(), k)
    assert fast.counters() == slow.counters() == dict(sorted(expected.items()))
    data = fast.to_bytes()
    assert data == slow.to_bytes() == reference_bytes(slow)
    again = StandardMisraGries.from_bytes(data)
    assert again._counters is None and again._summary is not None  # arrays, no dict
    assert again.to_bytes() == data and again.counters() == fast.counters()
    assert again.build is Build.MERGED
    # the merged sketch does not share memory with the shards' kernel arrays
    before = fast.to_bytes()
    fast_shards[0].update_batch(np.array(stream[:500], dtype=np.int64))
    assert fast.to_bytes() == before
    # sequential (standard MG) steps after the merge: the summary becomes the dict, as before
    for x in stream[:100]:
        again.update(x)
        slow.update(x)
    assert again.to_bytes() == slow.to_bytes()


def test_standard_mg_and_pamg_bytes_equal_the_reference() -> None:
    rng = np.random.default_rng(5)
    for k in K_VALUES:
        items = (rng.zipf(1.2, 5 * k + 10) % (4 * k)).tolist()
        std = StandardMisraGries(k)
        std.update_batch(items)
        data = std.to_bytes()
        assert data == reference_bytes(std)
        again = StandardMisraGries.from_bytes(data)
        assert again.to_bytes() == data and again.counters() == std.counters()
        if k < 2:
            continue
        m = min(4, k - 1)
        rows = np.sort(np.array(items[: len(items) // m * m]).reshape(-1, m), axis=1)
        keep = np.ones_like(rows, dtype=bool)
        keep[:, 1:] = rows[:, 1:] != rows[:, :-1]
        offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
        pamg = PrivacyAwareMisraGries(k, m)
        pamg.update_batch_flat(rows[keep], offsets)
        data = pamg.to_bytes()
        assert data == reference_bytes(pamg)
        loaded = PrivacyAwareMisraGries.from_bytes(data)
        assert loaded.to_bytes() == data and loaded.counters() == pamg.counters()
        for s in (pamg, loaded):
            s.update_batch_flat(rows[keep][: offsets[10]], offsets[:11])
        assert loaded.to_bytes() == pamg.to_bytes()


@pytest.mark.parametrize(
    ("cls", "params", "counters", "message"),
    [
        (StandardMisraGries, [2, 10, Build.MERGED.code], {1: 1, 2: 1, 3: 1}, "more than k"),
        (StandardMisraGries, [2, 10, Build.MERGED.code], {1: 1, 2: 0}, "zero counters"),
        (StandardMisraGries, [2, 10, Build.MERGED.code], {1: 1, Dummy(1): 1}, "dummy keys"),
        (StandardMisraGries, [2, 3, Build.MERGED.code], {1: 2, 2: 2}, "sum to <= n"),
        (StandardMisraGries, [2, 3, Build.MERGED.code], {1: 4, 2: -1}, ">= 0"),
        (MisraGries, [2, 10, Build.MERGED.code, 0], {1: 1, 2: 0}, "zero counters"),
        (PrivacyAwareMisraGries, [3, 10, Build.PAMG.code, 2, 5], {1: 1, 2: 0}, "zero counters"),
    ],
)
def test_summary_restore_rejects_invalid_counters(cls, params, counters, message) -> None:
    with pytest.raises(SketchFormatError, match=message):
        cls.from_bytes(encode(cls, params, reference_payload(counters)))


def test_all_int_encode_counters_and_counts_from_mapping_match_the_general_paths() -> None:
    rng = np.random.default_rng(9)
    for size in (0, 1, 2, 50, 3000):
        keys = rng.choice(np.array([-(2**63), 2**63 - 1, 0, -1, 1]), size=min(size, 5), replace=False)
        keys = np.unique(np.concatenate([keys, rng.integers(-(2**62), 2**62, size)]))
        mapping = dict(
            zip(rng.permutation(keys).tolist(), rng.integers(0, 9, len(keys)).tolist(), strict=True)
        )
        assert encode_counters(mapping) == reference_payload(mapping)
        counts = Counts.from_mapping(mapping)
        expected = {x: c for x, c in mapping.items() if c > 0}
        assert counts.to_dict() == expected and list(counts.to_dict()) == list(expected)
        assert counts.to_sorted_dict() == dict(sorted(expected.items()))
        mixed = {**mapping, "b": 2, "a": 0, Dummy(3): 0}
        assert encode_counters(mixed) == reference_payload(mixed)
