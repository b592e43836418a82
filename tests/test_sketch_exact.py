"""The exact histogram (``ExactHistogram``, build ``EXACT``): the reference every sketch is measured
against, and the input of the ``exact_threshold`` mechanism.

* its counts are ``collections.Counter``'s on random streams of int and str items cut into random
  batches (lists and int64 arrays), whatever the cuts;
* merging sums the counts (any order), and refuses other sketch types and another k;
* bytes round-trip exactly, and decoding refuses every state an exact histogram cannot be in
  (a zero or negative count, counts that do not sum to n, dummy keys, another build), as well as
  truncated or flipped bytes;
* the release layer keeps the MG mechanisms away from it (with a hint to use exact_threshold), and
  keeps exact_threshold away from MG sketches (with the hint back).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from privstream.accounting import Budget, PrivacyLedger
from privstream.mechanisms import MECHANISMS, MechanismNotApplicable, applicable_mechanisms, get, release
from privstream.noise import SeededRandomSource
from privstream.sketches import (
    EXACT,
    Build,
    Dummy,
    ExactHistogram,
    MisraGries,
    PrivacyAwareMisraGries,
    SketchFormatError,
    StandardMisraGries,
    load_sketch,
    merge_in_order,
)
from privstream.sketches.binary_format import encode, encode_counters

BUDGET = Budget(1.0, 1e-6)


def random_stream(rng: np.random.Generator, n: int, strs: bool) -> list[object]:
    """Zipf ints (some negative and some large), with about a third str items if ``strs``."""
    out: list[object] = [int(x) for x in rng.zipf(1.3, n) % 500]
    for i in range(0, n, 7):
        out[i] = -int(out[i]) - 1  # type: ignore[call-overload]
    if n:
        out[0] = 2**62 + int(rng.integers(5))
    if strs:
        for i in rng.choice(n, size=n // 3, replace=False).tolist() if n else []:
            out[i] = "item-" + "abcdeé"[int(rng.integers(6))]
    return out


def cuts(rng: np.random.Generator, stream: list[object]) -> list[list[object]]:
    points = sorted(rng.integers(0, len(stream) + 1, size=int(rng.integers(0, 8))).tolist())
    return [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]


@pytest.mark.parametrize("strs", [False, True], ids=["int", "int+str"])
def test_counts_equal_counter_for_any_batch_cuts(strs: bool) -> None:
    rng = np.random.default_rng(20 + strs)
    for trial in range(80):
        stream = random_stream(rng, int(rng.integers(0, 400)), strs)
        truth = Counter(stream)
        batched, one_by_one = ExactHistogram(), ExactHistogram()
        for piece in cuts(rng, stream):
            ints_only = all(type(x) is int for x in piece)
            batched.update_batch(np.asarray(piece, dtype=np.int64) if ints_only and trial % 2 else piece)
        for x in stream:
            one_by_one.update(x)
        for sketch in (batched, one_by_one):
            assert sketch.counters() == dict(truth) and sketch.n == len(stream)
            assert sketch.distinct() == len(truth) and sketch.k == 1 and sketch.build is EXACT
            assert all(sketch.estimate(x) == c for x, c in truth.items())
            assert sketch.estimate("never seen") == 0 == sketch.estimate(10**15)
        assert batched.to_bytes() == one_by_one.to_bytes(), trial  # batching cannot matter
        keys = list(batched.counters())
        assert keys == sorted((x for x in keys if type(x) is int), key=int) + sorted(
            x for x in keys if type(x) is str
        )  # the universe's order: ints numerically, then strs


def test_a_bad_item_counts_nothing_of_its_batch() -> None:
    sketch = ExactHistogram()
    sketch.update_batch([1, 2, 2])
    before = sketch.to_bytes()
    for bad in ([3, True], [3, 1.5], [3, None], [3, 2**64]):
        with pytest.raises((TypeError, ValueError)):
            sketch.update_batch(bad)
        assert sketch.to_bytes() == before
    with pytest.raises(TypeError):
        sketch.update(False)
    assert sketch.to_bytes() == before and sketch.n == 3


def test_merge_is_the_per_key_sum_in_any_order() -> None:
    rng = np.random.default_rng(4)
    streams = [random_stream(rng, int(rng.integers(0, 300)), bool(i % 2)) for i in range(5)]
    parts = []
    for s in streams:
        h = ExactHistogram()
        h.update_batch(s)
        parts.append(h)
    before = [p.to_bytes() for p in parts]
    truth = Counter(x for s in streams for x in s)
    forward, backward = merge_in_order(parts), merge_in_order(parts[::-1])
    assert [p.to_bytes() for p in parts] == before  # inputs unchanged
    for merged in (forward, backward):
        assert type(merged) is ExactHistogram and merged.build is EXACT
        assert merged.counters() == dict(truth) and merged.n == sum(map(len, streams))
    assert forward.to_bytes() == backward.to_bytes()  # exact: the order cannot matter
    in_place = ExactHistogram()
    for p in parts:
        in_place.merge(p)
    assert in_place.to_bytes() == forward.to_bytes()
    with pytest.raises(TypeError, match="cannot merge MisraGries"):
        in_place.merge(MisraGries(4))
    with pytest.raises(ValueError, match="k"):
        merge_in_order(parts, k=2)


def test_bytes_round_trip_exactly_and_continue() -> None:
    rng = np.random.default_rng(8)
    for strs in (False, True):
        sketch = ExactHistogram()
        sketch.update_batch(random_stream(rng, 500, strs))
        data = sketch.to_bytes()
        again, loaded = ExactHistogram.from_bytes(data), load_sketch(data)
        assert type(loaded) is ExactHistogram and data[6] == ExactHistogram.type_code == 6
        assert again.to_bytes() == loaded.to_bytes() == data
        assert again.counters() == sketch.counters() and again.n == sketch.n
        more = random_stream(rng, 50, strs)
        sketch.update_batch(more)
        again.update_batch(more)
        assert again.to_bytes() == sketch.to_bytes()
    empty = ExactHistogram()
    assert ExactHistogram.from_bytes(empty.to_bytes()).counters() == {} and "distinct=0" in repr(empty)


def _state(n: int, counters: dict, build: int = EXACT.code) -> bytes:
    """Well-formed bytes (valid envelope and checksum) holding an arbitrary histogram state."""
    return encode(ExactHistogram, [n, build], encode_counters(counters))


def test_states_an_exact_histogram_cannot_be_in_are_refused() -> None:
    assert ExactHistogram.from_bytes(_state(5, {1: 2, "a": 3})).counters() == {1: 2, "a": 3}
    for data, why in [
        (_state(2, {1: 2, 3: 0}), "> 0"),  # a stored zero count
        (_state(1, {1: 2, 3: -1}), "> 0"),  # a negative count
        (_state(4, {1: 2, "a": 3}), "sum to n"),  # counts do not sum to n
        (_state(6, {1: 2, "a": 3}), "sum to n"),
        (_state(3, {1: 2, Dummy(0): 1}), "dummy"),  # an MG placeholder key
        (_state(5, {1: 2, "a": 3}, Build.MERGED.code), "build EXACT"),  # another build
    ]:
        with pytest.raises(SketchFormatError, match=why):
            ExactHistogram.from_bytes(data)
    with pytest.raises(SketchFormatError):
        ExactHistogram.from_bytes(_state(5, {1: 2, "a": 3}, 99))  # an unknown build code
    data = _state(5, {1: 2, "a": 3})
    for cut in (3, len(data) // 2, len(data) - 1):
        with pytest.raises(SketchFormatError):
            ExactHistogram.from_bytes(data[:cut])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    with pytest.raises(SketchFormatError):
        ExactHistogram.from_bytes(bytes(flipped))
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        ExactHistogram.from_bytes(MisraGries(1).to_bytes())
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        MisraGries.from_bytes(data)


def _exact(stream: list[object]) -> ExactHistogram:
    h = ExactHistogram()
    h.update_batch(stream)
    return h


def test_mg_mechanisms_refuse_an_exact_histogram_with_the_hint() -> None:
    """k = 1 on an exact histogram means "one counter changes", not "at most k stored keys": every
    MG mechanism (whose union bounds read k as the stored keys) refuses it before any charge, the
    k-counter ones saying to use exact_threshold; auto picks exact_threshold."""
    sketch = _exact([1] * 50 + [2] * 20 + list(range(3, 40)))
    ledger = PrivacyLedger(Budget(10.0, 1e-3))
    for charged, domain in enumerate((None, range(100))):
        reasons = applicable_mechanisms(sketch, BUDGET, domain=domain)
        assert [name for name, reason in reasons.items() if not reason] == ["exact_threshold"]
        for name in MECHANISMS:
            if name == "exact_threshold":
                continue
            structural = domain is not None or not get(name).needs_domain  # else: "pass domain="
            with pytest.raises(MechanismNotApplicable, match="this one is EXACT" if structural else "domain"):
                release(sketch, BUDGET, mechanism=name, domain=domain, ledger=ledger)
            if structural and name in ("gshm", "laplace_threshold", "chan_topk", "chan_pmg"):
                assert "use exact_threshold" in reasons[name], reasons[name]
        assert ledger.sequence == charged  # every refusal before the charge
        out = release(sketch, BUDGET, domain=domain, ledger=ledger, rng=SeededRandomSource(1))
        assert out.mechanism == "exact_threshold" and dict(out.items).keys() >= {1, 2}
    assert ledger.sequence == 2


@pytest.mark.parametrize(
    "make",
    [
        lambda: MisraGries(8),
        lambda: StandardMisraGries(8),
        lambda: merge_in_order([MisraGries(8), MisraGries(8)]),
        lambda: PrivacyAwareMisraGries(8, 2),
        lambda: merge_in_order([PrivacyAwareMisraGries(8, 2)] * 2),
    ],
    ids=["alg1", "standard", "merged", "pamg", "pamg_merged"],
)
def test_exact_threshold_refuses_misra_gries_sketches_with_the_hint(make) -> None:  # noqa: ANN001
    """An MG sketch's neighbours may differ on up to k counters: a sensitivity-1 release of its
    counters would not be private (Lebeda-Tetek §4), so exact_threshold refuses every MG build."""
    sketch = make()
    ledger = PrivacyLedger(Budget(10.0, 1e-3), composition="sequential")
    for domain in (None, range(10)):
        with pytest.raises(MechanismNotApplicable, match="exact counts") as info:
            release(sketch, BUDGET, mechanism="exact_threshold", domain=domain, ledger=ledger)
        assert "use pmg, gshm or laplace_threshold" in str(info.value)
        assert applicable_mechanisms(sketch, BUDGET, domain=domain)["exact_threshold"] == str(info.value)
        assert (
            release(sketch, BUDGET, domain=domain, rng=SeededRandomSource(2)).mechanism != "exact_threshold"
        )
    assert ledger.sequence == 0
