"""Which sketch a shard keeps, and how shard sketches are created, updated, loaded and merged.

Each sketch family the job can run is one :class:`ShardSketchKind` in a small registry
(:func:`register_kind`, :func:`get_kind`); :class:`SketchSpec` looks its ``kind`` up there and
never branches on the family's name. The registered kinds:

``SketchSpec("mg", k)``: per shard a Lebeda–Tětek Alg. 1 :class:`~privstream.sketches.MisraGries`
fed with micro-batches through ``update_batch``, which processes them exactly item by item (the
compiled Alg. 1 kernel), so a shard's sketch is its stream's sequential Alg. 1 sketch whatever the
message boundaries (Lemma 2); shards are merged with :func:`~privstream.sketches.merge_in_order`
into a standard MG sketch (mergeable-summaries merge, Cor. 7.2: the shards must be cut by a hash of
``shard_key``).

``SketchSpec("pamg", k, m)``: per shard a :class:`~privstream.sketches.PrivacyAwareMisraGries`
(Alg. 4) fed one user set at a time; shards merged with :func:`~privstream.sketches.merge_in_order`
(``Build.PAMG_MERGED``, Cor. 8.10).

How an epoch's shard sketches reach the release (``release_mode``, :data:`RELEASE_MODES`):

* ``"per-shard"`` (the job's default for MG): every shard's sequential Alg. 1 sketch is released
  on its own — PMG (Alg. 2, threshold independent of k) — and the releases are summed key-wise by
  :func:`~privstream.mechanisms.release_disjoint`: parallel composition over the hash partition
  (one event lies in one shard). With ``shard_key="item"`` the shards hold disjoint items, so an
  item's value is its one shard's PMG estimate (error n_shard/(k+1) + PMG's noise).
* ``"merged"`` (PAMG's default): the shard sketches are merged in shard-id order and the merged
  sketch released with GSHM / thresholded Laplace (PMG is refused on merged sketches, §7), whose
  thresholds grow with k.

To add a family: one :func:`register_kind` call with its :class:`ShardSketchKind`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from privstream.operators.payloads import EventPayload, Payload, UserSetPayload
from privstream.operators.state_records import pack_shard_sketches, unpack_shard_sketches

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

ShardSketchT = MisraGries | StandardMisraGries | PrivacyAwareMisraGries

#: what a producer may hash to pick an event's partition (:mod:`privstream.operators.routing`)
SHARD_KEYS = ("item", "user")
#: how an epoch's shard sketches are released (module docstring)
RELEASE_MODES = ("per-shard", "merged")


@dataclass(frozen=True)
class ShardSketchKind:
    """One sketch family of the job: everything :class:`SketchSpec` needs to know about it.

    ``create(k, m)`` makes an empty shard sketch and ``load`` decodes one; ``merged_type`` is what
    ``merge_in_order`` of its shard sketches gives. It consumes ``payload_type`` pieces
    (:class:`EventPayload` batches or one :class:`UserSetPayload`), fed by ``feed(sketch, piece)``.
    ``shard_keys``: the shard keys it allows, the first one the default (``shard_key_rule`` says why
    when it allows fewer than :data:`SHARD_KEYS`). ``user_level``: its privacy unit is one user's set
    (it takes ``m``, the bound on a set, and needs m < k); else one event (no ``m``).
    ``merge_citation``: the merge corollaries its shard rule relies on."""

    name: str
    title: str  #: the family's name in messages ("MG", "PAMG")
    create: Callable[[int, int | None], Any]
    load: Callable[[bytes], Any]
    merged_type: type
    payload_type: type[EventPayload] | type[UserSetPayload]
    feed: Callable[[Any, Any], None]
    shard_keys: tuple[str, ...]
    user_level: bool
    merge_citation: str
    default_release_mode: str
    shard_key_rule: str = ""


_KINDS: dict[str, ShardSketchKind] = {}


def register_kind(kind: ShardSketchKind) -> ShardSketchKind:
    """Add ``kind`` to the registry (ValueError if its name is taken or its shard keys are unknown)."""
    if kind.name in _KINDS:
        raise ValueError(f"sketch kind {kind.name!r} is already registered")
    if not kind.shard_keys or not set(kind.shard_keys) <= set(SHARD_KEYS):
        raise ValueError(f"sketch kind {kind.name!r}: shard keys must be among {SHARD_KEYS}")
    _KINDS[kind.name] = kind
    return kind


def kind_names() -> tuple[str, ...]:
    """Registered kind names, in registration order."""
    return tuple(_KINDS)


def get_kind(name: str) -> ShardSketchKind:
    """The registered kind ``name`` (ValueError naming the choices otherwise)."""
    try:
        return _KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"sketch: expected one of {kind_names()}, got {name!r}") from None


def kind_for(*, user_level: bool) -> ShardSketchKind:
    """The job's sketch kind at event level or user level: the first registered one."""
    return next(kind for kind in _KINDS.values() if kind.user_level == user_level)


def _feed_mg(sketch: MisraGries, piece: EventPayload) -> None:
    assert isinstance(sketch, MisraGries)
    sketch.update_batch(piece.items)  # exactly item by item (Alg. 1)


def _feed_pamg(sketch: PrivacyAwareMisraGries, piece: UserSetPayload) -> None:
    assert isinstance(sketch, PrivacyAwareMisraGries)
    sketch.update(piece.items)  # one user's set


MG_KIND = register_kind(
    ShardSketchKind(
        name="mg",
        title="MG",
        create=lambda k, _m: MisraGries(k),
        load=MisraGries.from_bytes,
        merged_type=StandardMisraGries,
        payload_type=EventPayload,
        feed=_feed_mg,
        shard_keys=("item", "user"),
        user_level=False,
        merge_citation="Cor. 7.2",
        default_release_mode="per-shard",
    )
)
PAMG_KIND = register_kind(
    ShardSketchKind(
        name="pamg",
        title="PAMG",
        create=PrivacyAwareMisraGries,
        load=PrivacyAwareMisraGries.from_bytes,
        merged_type=PrivacyAwareMisraGries,
        payload_type=UserSetPayload,
        feed=_feed_pamg,
        shard_keys=("user",),
        user_level=True,
        merge_citation="Cor. 7.2, 8.10",
        default_release_mode="merged",
        shard_key_rule="a user-level (PAMG) job shards by user (one user's sets in one shard)",
    )
)


@dataclass(frozen=True)
class SketchSpec:
    """``kind`` names a registered :class:`ShardSketchKind`: ``"mg"`` (event level) or ``"pamg"``
    (user level, needs ``m``)."""

    kind: str
    k: int
    m: int | None = None
    #: what the producer hashes to pick an event's partition (verified per event,
    #: :mod:`privstream.operators.routing`): "item" (default for MG) or "user" (always for PAMG)
    shard_key: str | None = None
    #: "per-shard" or "merged" (module docstring); None: the kind's default
    release_mode: str | None = None

    def __post_init__(self) -> None:
        kind = get_kind(self.kind)
        if self.shard_key is None:
            object.__setattr__(self, "shard_key", kind.shard_keys[0])
        if self.release_mode is None:
            object.__setattr__(self, "release_mode", kind.default_release_mode)
        if self.release_mode not in RELEASE_MODES:
            raise ValueError(f"release_mode: expected one of {RELEASE_MODES}, got {self.release_mode!r}")
        if self.shard_key not in SHARD_KEYS:
            raise ValueError(f"shard_key: expected 'item' or 'user', got {self.shard_key!r}")
        if self.shard_key not in kind.shard_keys:
            raise ValueError(f"shard_key: {kind.shard_key_rule}")
        k = check_int("k", self.k, type_error=ValueError)
        if kind.user_level:
            m = check_int("m", self.m, type_error=ValueError)
            if m >= k:
                raise ValueError(f"m: {kind.title} needs m < k={k}, got {m}")
        elif self.m is not None:
            users = "/".join(other.title for other in _KINDS.values() if other.user_level)
            raise ValueError(f"m: only the user-level ({users}) sketch takes m")

    @property
    def sketch_kind(self) -> ShardSketchKind:
        """The registered descriptor of ``kind``."""
        return get_kind(self.kind)

    @property
    def per_shard(self) -> bool:
        """Each shard's sketch is released on its own (``release_mode == "per-shard"``)."""
        return self.release_mode == "per-shard"

    def mechanism_problem(self, mechanism: str, budget: Any) -> tuple[tuple[str, ...], str] | None:
        """Why the release entry point would refuse ``mechanism`` for this spec's release input (a
        shard's sketch per shard, the merged sketch merged) under ``budget``, as ``(the arguments to
        change, the reason listing the valid choices)``, or None. Asked of an empty sketch of the
        same kind, build, k and m: nothing is charged and no noise is drawn. (Count epochs calibrate
        to a smaller ε and δ by group privacy, which changes no mechanism's applicability: that
        depends on ε, δ > 0.)"""
        from privstream.mechanisms import applicable_mechanisms

        sketch = self.new() if self.per_shard else self.merge([])
        reasons = applicable_mechanisms(sketch, budget)
        valid = [name for name, reason in reasons.items() if not reason]
        if mechanism in valid or (mechanism == "auto" and valid):
            return None
        which = "per-shard" if self.per_shard else "merged"
        what = f"this job's {which} {self.kind.upper()} sketches ({sketch.build.name})"
        if not valid:
            why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
            return ("epsilon", "delta"), (
                f"no mechanism can release {what} with ε={budget.epsilon:g}, δ={budget.delta:g} ({why})"
            )
        choices = f"choose one of: {', '.join(['auto', *valid])}"
        if mechanism not in reasons:
            return ("mechanism",), f"unknown mechanism {mechanism!r}; {choices}"
        return ("mechanism",), f"{mechanism} cannot release {what}: {reasons[mechanism]}; {choices}"

    @property
    def keys_disjoint(self) -> bool:
        """Shards hold disjoint items (the partitioner hashes the item): public, from the config."""
        return self.shard_key == "item"

    @property
    def user_sets(self) -> bool:
        return self.sketch_kind.user_level

    @property
    def shard_relation(self) -> tuple[Condition, ...]:
        """The conditions the releases add to their neighbour relation about the shards: the shard
        rule and merge order (Cor. 7.2 / 8.10), the per-event routing check (fails closed) and, at
        user level, the unchecked one-set-per-user-and-epoch assumption (else group size s, Lemma 8.1)."""
        combined = (
            "each shard's sketch released on its own and the releases summed (parallel composition: "
            "one unit lies in one shard)"
            if self.per_shard
            else f"merged in shard-id order (Lebeda-Tetek {self.sketch_kind.merge_citation})"
        )
        conditions = (
            Condition(
                ConditionKind.SHARD_RULE,
                f"shards = Kafka partitions chosen by a hash of the {self.shard_key}, {combined}",
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
        return self.sketch_kind.create(self.k, self.m)

    def load(self, data: bytes) -> ShardSketchT:
        return self.sketch_kind.load(data)

    def _check_merged(self, sketch: object) -> StandardMisraGries | PrivacyAwareMisraGries:
        expected = self.sketch_kind.merged_type
        if not isinstance(sketch, expected):
            raise TypeError(f"expected a merged {expected.__name__}, got {type(sketch).__name__}")
        return sketch

    def load_merged(self, data: bytes) -> StandardMisraGries | PrivacyAwareMisraGries:
        """Decode a merged sketch (the combine operator's output in merged mode)."""
        return self._check_merged(load_sketch(data))

    def check_user_set(self, items: tuple[object, ...]) -> None:
        """Raise ValueError (naming m) unless ``items`` are at most m distinct items."""
        if self.m is None:
            raise ValueError(f"m: this job is event-level ({self.sketch_kind.title}); user sets need --m")
        try:
            check_user_items(self.m, items)
        except ValueError as exc:
            raise ValueError(f"m: {exc}") from exc

    def update(self, sketch: ShardSketchT, piece: Payload) -> None:
        """Feed one epoch's slice of a message (a batch of events, or one user's set)."""
        kind = self.sketch_kind
        if not isinstance(piece, kind.payload_type):  # end markers never reach a sketch
            raise TypeError(f"cannot update a {kind.title} sketch with {type(piece).__name__}")
        kind.feed(sketch, piece)

    def combine(self, shard_data: Mapping[int, bytes], shards: int) -> bytes:
        """An epoch's release input from the sketches of the shards that sent one: per shard, every
        shard ``0..shards-1`` in order (an empty sketch for a shard that sent none); merged, the
        fixed-order merge of the sketches sent, sorted by shard id."""
        if self.per_shard:
            empty = self.new().to_bytes()
            return pack_shard_sketches([shard_data.get(s, empty) for s in range(shards)])
        return self.merge([shard_data[s] for s in sorted(shard_data)]).to_bytes()

    def load_release_input(
        self, data: bytes
    ) -> list[ShardSketchT] | StandardMisraGries | PrivacyAwareMisraGries:
        """Decode :meth:`combine`'s output: the list of shard sketches, or the merged sketch."""
        if self.per_shard:
            return [self.load(part) for part in unpack_shard_sketches(data)]
        return self.load_merged(data)

    def merge(self, shard_sketches: Sequence[bytes]) -> StandardMisraGries | PrivacyAwareMisraGries:
        """Merge serialised shard sketches in the given order (callers pass them sorted by shard id)."""
        sketches = [self.load(b) for b in shard_sketches] or [self.new()]
        return self._check_merged(merge_in_order(sketches, k=self.k))  # MG: standard MG; PAMG: a PAMG
