"""The sketch protocol (privstream.sketches.protocol), the one merge (merge_in_order) and the type
registry of the binary format, for every registered sketch class.

* every stream sketch implements :class:`Sketch` (nothing abstract left) and has a case here;
* ``update_batch`` equals ``update`` element by element for random streams and random cuts
  (Lebeda–Tětek Alg. 1 / Lemma 2, Alg. 4 / Lemma 8.9: batching never changes a sketch);
* round trips through ``to_bytes``/``from_bytes``/``load_sketch``, and bytes pinned to the format
  as it was before the registry replaced the SketchType enum;
* ``merge_in_order`` equals the Agarwal et al. fold of the reference counters in the given order
  (Lemma 7.1 / Cor. 7.2) — for Count-Min the sketch of the concatenated streams — and leaves its
  inputs unchanged;
* the removed names (merge_misra_gries, merge_pamg, update_user, SketchType, Count-Min weights)
  are gone, and the registry refuses clashing codes and unregistered subclasses.
"""

from __future__ import annotations

import hashlib
import inspect
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Self

import numpy as np
import pytest

import privstream.sketches as sketches_pkg
from privstream.sketches import (
    EXACT,
    Build,
    CountMinSketch,
    ExactHistogram,
    Item,
    KeyedSketch,
    MisraGries,
    PrivacyAwareMisraGries,
    ReducedSketch,
    Sketch,
    StandardMisraGries,
    binary_format,
    counter_sketch,
    load_sketch,
    merge_in_order,
    misra_gries,
    pamg,
    reduce_sensitivity,
    register_sketch,
    registered_sketches,
)
from privstream.sketches.binary_format import decode, decode_counters, encode, encode_counters
from tests.test_sketch_reference import reference_merge

Element = Any
Stream = list[Element]

# ------------------------------------------------------------------ one case per stream sketch


def _items(rng: np.random.Generator, n: int) -> Stream:
    """Zipf-ish ints, sometimes with str items (then the item-by-item path runs, not the kernel)."""
    out: Stream = (rng.zipf(1.4, n) % 12).tolist()
    if rng.random() < 0.3:
        for i in rng.choice(n, size=max(1, n // 5), replace=False).tolist() if n else []:
            out[i] = "abc"[int(rng.integers(3))]
    return out


def _users(rng: np.random.Generator, n: int) -> Stream:
    """Sets of at most m = 3 distinct items."""
    return [sorted({int(x) for x in rng.zipf(1.4, int(rng.integers(1, 4))) % 12}) for _ in range(n)]


#: class -> (a fresh sketch, a random stream of its elements); every stream sketch must be here
CASES: dict[type[Sketch], tuple[Callable[[], Sketch], Callable[[np.random.Generator, int], Stream]]] = {
    MisraGries: (lambda: MisraGries(5), _items),
    StandardMisraGries: (lambda: StandardMisraGries(5), _items),
    PrivacyAwareMisraGries: (lambda: PrivacyAwareMisraGries(6, 3), _users),
    CountMinSketch: (lambda: CountMinSketch(16, 3, 7), _items),
    ExactHistogram: (ExactHistogram, _items),
}

#: the wire format's type codes: never change one
CODES = {
    MisraGries: 1,
    StandardMisraGries: 2,
    PrivacyAwareMisraGries: 3,
    ReducedSketch: 4,
    CountMinSketch: 5,
    ExactHistogram: 6,
}

#: merges fold into these (the merged builds of Cor. 7.2 / Cor. 8.10)
MERGED = {
    MisraGries: (StandardMisraGries, Build.MERGED),
    StandardMisraGries: (StandardMisraGries, Build.MERGED),
    PrivacyAwareMisraGries: (PrivacyAwareMisraGries, Build.PAMG_MERGED),
    CountMinSketch: (CountMinSketch, None),
    ExactHistogram: (ExactHistogram, EXACT),
}

classes = pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)


def built(cls: type[Sketch], stream: Iterable[Element]) -> Sketch:
    sketch = CASES[cls][0]()
    for element in stream:
        sketch.update(element)
    return sketch


def test_every_registered_stream_sketch_is_a_sketch_with_a_case() -> None:
    registry = registered_sketches()
    assert {cls: code for code, cls in registry.items()} == CODES
    stream_sketches = {cls for cls in registry.values() if issubclass(cls, Sketch)}
    assert stream_sketches == set(CASES)
    assert set(registry.values()) - stream_sketches == {ReducedSketch}  # Alg. 3 output, not a stream sketch
    exported = [getattr(sketches_pkg, name) for name in sketches_pkg.__all__]
    concrete = [c for c in exported if inspect.isclass(c) and not inspect.isabstract(c)]
    assert {c for c in concrete if callable(getattr(c, "update", None))} == set(CASES)


@classes
def test_implements_the_protocol(cls: type[Sketch]) -> None:
    assert issubclass(cls, Sketch) and not inspect.isabstract(cls)
    sketch = CASES[cls][0]()
    assert isinstance(sketch, Sketch)
    assert isinstance(sketch, KeyedSketch) is (cls is not CountMinSketch)
    assert cls.type_code == CODES[cls] and registered_sketches()[cls.type_code] is cls
    assert sketch.n == 0 and sketch.k >= 1
    assert sketch.build is None if cls is CountMinSketch else isinstance(sketch.build, Build)


def test_an_incomplete_sketch_cannot_be_instantiated() -> None:
    class NoMerge(Sketch):
        k = n = 1
        build = None

        def update(self, element: Element) -> None: ...
        def to_bytes(self) -> bytes:
            return b""

        @classmethod
        def from_bytes(cls, data: bytes) -> Self:
            return cls()

        def estimate(self, item: object) -> int:
            return 0

    with pytest.raises(TypeError, match="merge"):
        NoMerge()  # type: ignore[abstract]


# ------------------------------------------------------------------ update_batch == update


def _cuts(rng: np.random.Generator, stream: Stream) -> list[Stream]:
    points = sorted(rng.choice(len(stream) + 1, size=int(rng.integers(0, 6)), replace=True).tolist())
    return [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]


@classes
def test_update_batch_is_update_element_by_element(cls: type[Sketch]) -> None:
    make, elements = CASES[cls]
    rng = np.random.default_rng(11)
    for trial in range(60):
        stream = elements(rng, int(rng.integers(0, 80)))
        one = built(cls, stream)
        batched = make()
        for piece in _cuts(rng, stream):
            as_array = trial % 2 and cls is not PrivacyAwareMisraGries and all(type(x) is int for x in piece)
            batched.update_batch(np.asarray(piece, dtype=np.int64) if as_array else piece)
        assert batched.to_bytes() == one.to_bytes(), (trial, stream)
        assert batched.n == one.n


# ------------------------------------------------------------------ bytes


@classes
def test_round_trip_and_load_sketch_then_continue(cls: type[Sketch]) -> None:
    rng = np.random.default_rng(3)
    elements = CASES[cls][1]
    for _ in range(20):
        sketch, more = built(cls, elements(rng, 40)), elements(rng, 10)
        data = sketch.to_bytes()
        again, loaded = cls.from_bytes(data), load_sketch(data)
        assert type(loaded) is cls and again.to_bytes() == loaded.to_bytes() == data
        for s in (sketch, again):
            s.update_batch(more)
        assert again.to_bytes() == sketch.to_bytes()  # the decoded state is complete


def _golden() -> dict[str, object]:
    """The examples whose bytes were recorded before the registry replaced the SketchType enum."""
    rng = np.random.default_rng(2024)
    stream = (rng.zipf(1.3, 400) % 40).tolist() + ["a", "ü", "b", "a"]
    alg1 = MisraGries(6)
    alg1.update_batch(stream[:200])
    alg1.update_batch(stream[200:])
    std = StandardMisraGries(6)
    std.update_batch(stream)
    users = PrivacyAwareMisraGries(6, 3)
    users.update_batch(sorted(set(stream[i : i + 3]), key=str) for i in range(0, 300, 3))
    cms = CountMinSketch(32, 3, 12345)
    cms.update_batch(stream)
    big = MisraGries(8)
    big.update_batch(list(range(30)) * 3)
    return {
        "alg1": alg1,
        "alg1_fresh": MisraGries(3),
        "standard": std,
        "mg_fold": merge_in_order([alg1, std]),
        "mg_fold_k": merge_in_order([big, alg1], k=5),
        "mg_single": merge_in_order([alg1]),
        "pamg": users,
        "pamg_fold": merge_in_order([users, merge_in_order([users, users])]),
        "cms": cms,
        "reduced": reduce_sensitivity(alg1),
    }


GOLDEN = {
    "alg1": "0d84faac38b01965ffa3cba52b2f570af57d155c8f8f17034ae88be5f8a96a97",
    "alg1_fresh": "b0dfbaeab744405b46bfc5b2812e90c395495ddfd73a31ab234d5e5dd187a04f",
    "standard": "23a99f1bc7fd24d388fdd139a6e50816c197e9b398a41e913003824a984df0ab",
    "mg_fold": "6c0a6a28912fa089af0d196286ab6b12c4eea64704fcc6165d16eacea55c86c7",
    "mg_fold_k": "e3bad786f631d116d5d40c613672ad463dbe38e66b966aa57ecc5e6989d8be6d",
    "mg_single": "cf5a65a6deff8062ff3d7543f26a5656888e53293060f26415a0c3607123120e",
    "pamg": "38218f195c039383df41a68bc8689ecfba89e51e58cc4fa69c3976068ab3929e",
    "pamg_fold": "d6a6192b2729179edf6ae4b7213731629fc542e605fe1f15537d2bf6d12f4573",
    "cms": "842ec63c1c50396cd6b1848873779346115ebe7fb707e7cbc703c5a5624708b5",
    "reduced": "466f0f34fcf03fde5c14527f4aa460e57f530fccbafe20145d6f765b7abd57b2",
}


def test_bytes_are_those_of_the_format_before_the_registry() -> None:
    got = {name: hashlib.sha256(s.to_bytes()).hexdigest() for name, s in _golden().items()}  # type: ignore[attr-defined]
    assert got == GOLDEN


# ------------------------------------------------------------------ merge_in_order


def _agarwal_fold(parts: list[Sketch], k: int) -> dict[Item, int]:
    """The Agarwal et al. merge of the parts' counters in the given order (reference dicts)."""
    out: dict[Item, int] = {}
    for part in parts:
        assert isinstance(part, KeyedSketch)
        out = reference_merge(out, part.counters(), k)
    return out


def _check_against_reference(
    cls: type[Sketch], merged: Sketch, parts: list[Sketch], streams: list[Stream]
) -> None:
    """What merge_in_order must give, by an independent reference; a new sketch adds its own here."""
    if issubclass(cls, counter_sketch.CounterSketch):  # MG types and PAMG: Lemma 7.1's merge
        assert isinstance(merged, KeyedSketch) and merged.counters() == _agarwal_fold(parts, merged.k)
    elif cls in (CountMinSketch, ExactHistogram):  # linear: merging = sketching the concatenation
        assert merged.to_bytes() == built(cls, [x for s in streams for x in s]).to_bytes()
        if cls is ExactHistogram:  # and the exact counts are the per-key sums
            assert merged.counters() == dict(Counter(x for s in streams for x in s))  # type: ignore[attr-defined]
    else:
        pytest.fail(f"add a reference merge for {cls.__name__} to _check_against_reference")


@classes
def test_merge_in_order_is_the_fixed_order_fold(cls: type[Sketch]) -> None:
    make, elements = CASES[cls]
    rng = np.random.default_rng(5)
    for _ in range(25):
        streams = [elements(rng, int(rng.integers(0, 50))) for _ in range(int(rng.integers(1, 5)))]
        parts = [built(cls, s) for s in streams]
        before = [p.to_bytes() for p in parts]
        merged = merge_in_order(parts)
        assert [p.to_bytes() for p in parts] == before  # inputs unchanged
        merged_type, merged_build = MERGED[cls]
        assert type(merged) is merged_type and merged.build is merged_build
        assert merged.n == sum(p.n for p in parts)
        _check_against_reference(cls, merged, parts, streams)
        reverse = merge_in_order(parts[::-1])
        assert reverse.n == merged.n  # another fixed order: another (equally valid) sketch
    with pytest.raises(ValueError, match="empty"):
        merge_in_order([])
    with pytest.raises(ValueError, match="k"):
        merge_in_order([make(), make()], k=make().k + 1)  # k may not exceed an input's k


def test_merge_in_order_refuses_mixed_families() -> None:
    with pytest.raises(TypeError):
        merge_in_order([MisraGries(6), PrivacyAwareMisraGries(6, 3)])
    with pytest.raises(TypeError):
        merge_in_order([StandardMisraGries(16), CountMinSketch(16, 3, 7)])
    with pytest.raises(ValueError, match="width, depth, seed"):
        merge_in_order([CountMinSketch(16, 3, 7), CountMinSketch(16, 3, 8)])


# ------------------------------------------------------------------ removed names, registry


def test_the_removed_names_are_gone() -> None:
    for module, name in [
        (sketches_pkg, "merge_misra_gries"),
        (sketches_pkg, "merge_pamg"),
        (sketches_pkg, "SketchType"),
        (misra_gries, "merge_misra_gries"),
        (pamg, "merge_pamg"),
        (binary_format, "SketchType"),
        (binary_format, "register"),
        (counter_sketch, "merge_all_into"),
        (PrivacyAwareMisraGries, "update_user"),
    ]:
        assert not hasattr(module, name), name
    assert list(inspect.signature(CountMinSketch.update).parameters) == ["self", "item"]


def test_registry_refuses_clashes_and_unregistered_subclasses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary_format, "_REGISTRY", dict(binary_format._REGISTRY))
    for code in (0, 200, 256, True, "7"):  # 200..255: the operators' state records
        with pytest.raises(ValueError, match="1..199"):
            register_sketch(code)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        register_sketch(1)(type("Impostor", (StandardMisraGries,), {}))
    with pytest.raises(ValueError, match="another code"):
        register_sketch(199)(MisraGries)
    with pytest.raises(TypeError, match="from_bytes"):
        register_sketch(199)(type("NoBytes", (), {}))

    class Unregistered(StandardMisraGries):
        """Inherits the parent's type_code but is not registered: its bytes would decode as the parent."""

    sketch = Unregistered(3)
    with pytest.raises(TypeError, match="not a registered sketch"):
        sketch.to_bytes()


class _ExactCounts(KeyedSketch):
    """A toy keyed sketch (exact counts of at most k keys) written as a new sketch module would be:
    the protocol plus ``@register_sketch`` (applied in the test, on a copy of the registry)."""

    def __init__(self, k: int) -> None:
        self._k, self._n, self._c = k, 0, Counter[Item]()

    k = property(lambda self: self._k)
    n = property(lambda self: self._n)
    build = property(lambda self: None)

    def update(self, item: Item) -> None:
        if item not in self._c and len(self._c) == self._k:
            raise ValueError("more than k distinct items")
        self._c[item] += 1
        self._n += 1

    def merge(self, other: Sketch) -> None:
        assert isinstance(other, _ExactCounts)
        for item, count in other._c.items():
            self._c[item] += count
        self._n += other.n

    def merge_accumulator(self, k: int) -> _ExactCounts:
        return _ExactCounts(k)

    def to_bytes(self) -> bytes:
        return encode(type(self), [self._k, self._n], encode_counters({x: c for x, c in self._c.items()}))

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        (k, n), payload = decode(data, cls, 2)
        sketch = cls(k)
        sketch._n, sketch._c = n, Counter(decode_counters(payload))  # type: ignore[arg-type]
        return sketch

    def estimate(self, item: object) -> int:
        return self._c.get(item, 0)  # type: ignore[call-overload]

    def counters(self) -> dict[Item, int]:
        return dict(self._c)


def test_a_new_sketch_is_one_class_plus_its_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary_format, "_REGISTRY", dict(binary_format._REGISTRY))
    cls = register_sketch(199)(_ExactCounts)
    a, b = cls(4), cls(4)
    a.update_batch([1, 2, 2])  # the protocol's item-by-item update_batch
    b.update_batch(["x"])
    merged = merge_in_order([a, b])
    loaded = load_sketch(merged.to_bytes())
    assert type(loaded) is cls and loaded.counters() == {1: 1, 2: 2, "x": 1} and loaded.n == 4
    assert merged.to_bytes()[6] == 199
    with pytest.raises(binary_format.SketchFormatError, match="expected _ExactCounts, got MisraGries"):
        cls.from_bytes(MisraGries(2).to_bytes())
