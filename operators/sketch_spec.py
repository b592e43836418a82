"""Which sketch a shard keeps, and how shard sketches are created, updated, loaded and merged.

``SketchSpec("mg", k)``: per shard a Lebeda–Tětek Alg. 1 :class:`~privstream.sketches.MisraGries`
fed with micro-batches through ``update_batch``, which processes them exactly item by item (the
compiled Alg. 1 kernel), so a shard's sketch is its stream's sequential Alg. 1 sketch whatever the
message boundaries (Lemma 2); shards are merged with :func:`~privstream.sketches.merge_in_order`
into a standard MG sketch (mergeable-summaries merge, Cor. 7.2: the shards must be cut by a hash of
``shard_key``).

``SketchSpec("pamg", k, m)``: per shard a :class:`~privstream.sketches.PrivacyAwareMisraGries`
(Alg. 4) fed one user set at a time; shards merged with :func:`~privstream.sketches.merge_in_order`
(``Build.PAMG_MERGED``, Cor. 8.10).

Either way the sketch the release operator sees is a *merged* sketch, so the release entry point
uses GSHM / thresholded Laplace and refuses PMG (Alg. 2 needs a sequential Alg. 1 sketch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from privstream.operators.payloads import EventPayload, Payload, UserSetPayload

from privstream.privacy import Condition, ConditionKind, Enforcement
from privstream.sketches import (
    MisraGries,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    check_user_items,
    load_sketch,
    merge_in_order,
)
from privstream.validation import check_int

KINDS = ("mg", "pamg")

ShardSketchT = MisraGries | StandardMisraGries | PrivacyAwareMisraGries


@dataclass(frozen=True)
class SketchSpec:
    """``kind`` is ``"mg"`` (event level) or ``"pamg"`` (user level, needs ``m``)."""

    kind: str
    k: int
    m: int | None = None
    #: what the producer hashes to pick an event's partition (verified per event,
    #: :mod:`privstream.operators.routing`): "item" (default for MG) or "user" (always for PAMG)
    shard_key: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"sketch: expected one of {KINDS}, got {self.kind!r}")
        if self.shard_key is None:
            object.__setattr__(self, "shard_key", "user" if self.kind == "pamg" else "item")
        if self.shard_key not in ("item", "user"):
            raise ValueError(f"shard_key: expected 'item' or 'user', got {self.shard_key!r}")
        if self.kind == "pamg" and self.shard_key != "user":
            raise ValueError(
                "shard_key: a user-level (PAMG) job shards by user (one user's sets in one shard)"
            )
        k = check_int("k", self.k, type_error=ValueError)
        if self.kind == "pamg":
            m = check_int("m", self.m, type_error=ValueError)
            if m >= k:
                raise ValueError(f"m: PAMG needs m < k={k}, got {m}")
        elif self.m is not None:
            raise ValueError("m: only the user-level (PAMG) sketch takes m")

    @property
    def user_sets(self) -> bool:
        return self.kind == "pamg"

    @property
    def shard_relation(self) -> tuple[Condition, ...]:
        """The conditions the releases add to their neighbour relation about the shards: the shard
        rule and merge order (Cor. 7.2 / 8.10), the per-event routing check (fails closed) and, at
        user level, the unchecked one-set-per-user-and-epoch assumption (else group size s, Lemma 8.1)."""
        conditions = (
            Condition(
                ConditionKind.SHARD_RULE,
                f"shards = Kafka partitions chosen by a hash of the {self.shard_key}, merged in shard-id "
                "order (Lebeda-Tetek Cor. 7.2" + (", 8.10)" if self.user_sets else ")"),
            ),
            Condition(
                ConditionKind.ROUTING,
                "every event's partition is verified: after a misrouted message the job releases nothing more",
                Enforcement.VERIFIED,
            ),
        )
        if not self.user_sets:
            return conditions
        return (
            *conditions,
            Condition(
                ConditionKind.UNITS_PER_EPOCH,
                "one UserSetEvent per user and epoch (not checked by the job): a user who sends s sets in "
                "one epoch is protected only at group size s (Lemma 8.1)",
                Enforcement.ASSUMED,
            ),
        )

    def new(self) -> ShardSketchT:
        if self.kind == "pamg":
            assert self.m is not None
            return PrivacyAwareMisraGries(self.k, self.m)
        return MisraGries(self.k)

    def load(self, data: bytes) -> ShardSketchT:
        cls = PrivacyAwareMisraGries if self.kind == "pamg" else MisraGries
        return cls.from_bytes(data)

    def load_merged(self, data: bytes) -> StandardMisraGries | PrivacyAwareMisraGries:
        """Decode a merged sketch (the merge operator's output)."""
        sketch = load_sketch(data)
        expected = PrivacyAwareMisraGries if self.kind == "pamg" else StandardMisraGries
        if not isinstance(sketch, expected):
            raise TypeError(f"expected a merged {expected.__name__}, got {type(sketch).__name__}")
        return sketch

    def check_user_set(self, items: tuple[object, ...]) -> None:
        """Raise ValueError (naming m) unless ``items`` are at most m distinct items."""
        if self.m is None:
            raise ValueError("m: this job is event-level (MG); user sets need --m")
        try:
            check_user_items(self.m, items)
        except ValueError as exc:
            raise ValueError(f"m: {exc}") from exc

    def update(self, sketch: ShardSketchT, piece: Payload) -> None:
        """Feed one epoch's slice of a message (a batch of events, or one user's set)."""
        if isinstance(piece, UserSetPayload):
            assert isinstance(sketch, PrivacyAwareMisraGries)
            sketch.update(piece.items)
        elif isinstance(piece, EventPayload):
            assert isinstance(sketch, MisraGries)
            sketch.update_batch(piece.items)
        else:  # pragma: no cover - end markers never reach a sketch
            raise TypeError(f"cannot update a sketch with {type(piece).__name__}")

    def merge(self, shard_sketches: Sequence[bytes]) -> StandardMisraGries | PrivacyAwareMisraGries:
        """Merge serialised shard sketches in the given order (callers pass them sorted by shard id)."""
        sketches = [self.load(b) for b in shard_sketches] or [self.new()]
        merged = merge_in_order(sketches, k=self.k)  # MG: a StandardMisraGries; PAMG: a PAMG
        assert isinstance(merged, StandardMisraGries | PrivacyAwareMisraGries)
        return merged
