"""Structured neighbour relations: what two neighbouring inputs differ in, as a value.

A release is "(ε, δ)-DP for the neighbour relation R". R is composed along the path from events to
the release, and each part is a field here rather than a clause of a sentence:

* ``unit`` — what one neighbour step adds or removes: one event, or one user's set (LT §8);
* ``change`` — add/remove one unit at any position (Lebeda–Tětek Def. 1; n not public), or replace
  one at a fixed position (count epochs: lengths public; one replacement = remove + add, two steps);
* ``scope`` — where the unit sits: one stream, one of several merged streams (Cor. 7.2 / 8.10), one
  of the partitions of ``release_partitions`` (§7), or one shard's stream (count epochs);
* ``group_size`` — g such changes at once; the mechanism is calibrated for ``steps`` = g·(1 or 2)
  add/remove steps by group privacy (LT Lemma 8.1);
* ``epochs`` — how the job cut the stream into releases (punctuated time, count);
* ``conditions`` — what else the statement rests on (batches item by item, the shard rule,
  producer partitioning …), each marked as holding by construction, verified
  by the job, or ASSUMED (not checked);
* ``references`` — the lemmas that give the sketch's neighbour structure.

Relations compose with :meth:`NeighbourRelation.with_group_size`,
:meth:`~NeighbourRelation.with_conditions`, :meth:`~NeighbourRelation.in_epochs` and
:meth:`~NeighbourRelation.as_replacement`; :meth:`~NeighbourRelation.render` makes the text a
``Release`` shows, and is called only at the edge (``Release.neighbour_relation``, the Avro record,
logs). The module imports nothing from privstream but the dependency-free
:mod:`privstream.validation`, so sketches and mechanisms can both use it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from privstream.validation import check_int

_LEMMA_8_1 = "Lebeda-Tetek Lemma 8.1"

#: Where a replacement in one shard's stream happens (count epochs; the DPSW count-window jobs): the
#: new unit must stay in the shard, or positions shift in two shards.
SAME_SHARD_REPLACEMENT = "one shard's stream by one that the partitioner routes to the same shard"


class Unit(enum.Enum):
    """The privacy unit: what one neighbour step adds or removes. The value is the release's
    ``privacy_unit`` text."""

    EVENT = "event"
    USER_SET = "user (set of <= m distinct items)"

    @property
    def phrase(self) -> str:
        return "one event" if self is Unit.EVENT else "one user (one set of <= m distinct items)"

    @property
    def noun(self) -> str:
        return "event" if self is Unit.EVENT else "user set"

    @property
    def plural(self) -> str:
        return "events" if self is Unit.EVENT else "users"


class Change(enum.Enum):
    """How neighbours differ in one unit."""

    ADD_REMOVE = "add/remove"  #: insert or delete one unit at any position (LT Def. 1; n not public)
    REPLACE = "replace"  #: swap the unit at a fixed position for another (lengths public)

    @property
    def steps(self) -> int:
        """Add/remove steps one change takes: a replacement is a remove plus an add."""
        return 2 if self is Change.REPLACE else 1


class Scope(enum.Enum):
    """Where the changed unit sits; every other stream / partition / shard is unchanged."""

    ONE_STREAM = "one stream"
    MERGED_STREAMS = "one of the merged streams"
    PARTITIONS = "one of the partitions"
    SHARD = "one shard's stream"


class EpochKind(enum.Enum):
    """How the streaming job cut the input into releases (NONE: one release of a whole sketch)."""

    NONE = "none"
    PUNCTUATED_TIME = "punctuated time"
    COUNT = "count"


class Enforcement(enum.Enum):
    """Why a condition holds. Order: weakest first (see :meth:`NeighbourRelation.with_conditions`)."""

    ASSUMED = "assumed"  #: not checked: rendered "ASSUMES …"
    VERIFIED = "verified"  #: checked by the job on every event (fails closed)
    CONSTRUCTION = "by construction"  #: guaranteed by the code path itself

    @property
    def rank(self) -> int:
        return list(Enforcement).index(self)


class ConditionKind(enum.Enum):
    """What a condition is about; a relation holds at most one condition of each kind."""

    BATCHING = "batching"
    SHARD_RULE = "shard rule"
    ROUTING = "routing"
    EVENT_TIME = "event time"
    UNITS_PER_EPOCH = "units per epoch"


@dataclass(frozen=True)
class Condition:
    """One thing the statement rests on besides the sketch's lemma."""

    kind: ConditionKind
    text: str
    enforcement: Enforcement = Enforcement.CONSTRUCTION

    def render(self) -> str:
        return f"ASSUMES {self.text}" if self.enforcement is Enforcement.ASSUMED else self.text

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "text": self.text, "enforcement": self.enforcement.value}


@dataclass(frozen=True)
class NeighbourRelation:
    """A neighbour relation as data (module docstring); :meth:`render` gives its text."""

    unit: Unit
    change: Change = Change.ADD_REMOVE
    scope: Scope = Scope.ONE_STREAM
    group_size: int = 1
    epochs: EpochKind = EpochKind.NONE
    conditions: tuple[Condition, ...] = field(default_factory=tuple)
    references: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_int("group_size", self.group_size, type_error=ValueError)
        kinds = [c.kind for c in self.conditions]
        if len(set(kinds)) != len(kinds):
            raise ValueError("conditions: at most one condition of each kind (use with_conditions)")

    # ---- derived facts -----------------------------------------------------------------------
    @property
    def privacy_unit(self) -> str:
        return self.unit.value

    @property
    def steps(self) -> int:
        """Add/remove steps between neighbours: what the mechanism must be calibrated for (Lemma 8.1)."""
        return self.group_size * self.change.steps

    # ---- composition -------------------------------------------------------------------------
    def with_group_size(self, group_size: int) -> NeighbourRelation:
        """Neighbours ``group_size`` of this relation's steps apart (group privacy, Lemma 8.1)."""
        return replace(self, group_size=self.group_size * group_size)

    def with_conditions(self, *conditions: Condition) -> NeighbourRelation:
        """Add conditions. A condition of a kind already present replaces it only if it is weaker
        (ASSUMED < VERIFIED < CONSTRUCTION), in its place: composing never strengthens a claim, so
        the result does not depend on the order of composition."""
        out = list(self.conditions)
        for new in conditions:
            at = next((i for i, c in enumerate(out) if c.kind is new.kind), None)
            if at is None:
                out.append(new)
            elif new.enforcement.rank < out[at].enforcement.rank:
                out[at] = new
        return replace(self, conditions=tuple(out))

    def in_epochs(self, epochs: EpochKind) -> NeighbourRelation:
        return replace(self, epochs=epochs)

    def as_replacement(self, scope: Scope) -> NeighbourRelation:
        """The same guarantee read as replacing units at fixed positions of ``scope``: one
        replacement is a remove plus an add, so this relation must cover an even number (>= 2) of
        add/remove steps (ValueError otherwise: the mechanism was not calibrated for it)."""
        if self.change is not Change.ADD_REMOVE or self.group_size % 2:
            raise ValueError(
                "relation: a replacement is a remove plus an add, so it needs an add/remove relation "
                f"calibrated for an even number of steps (group privacy, {_LEMMA_8_1}); got {self.steps} "
                f"step(s) of {self.change.value}"
            )
        return replace(self, change=Change.REPLACE, scope=scope, group_size=self.group_size // 2)

    # ---- the edge ------------------------------------------------------------------------------
    def render(self) -> str:
        """The relation as text (for ``Release.neighbour_relation``, Avro and logs only)."""
        u = self.unit
        if self.change is Change.REPLACE:
            where = SAME_SHARD_REPLACEMENT if self.scope is Scope.SHARD else f"{self.scope.value} by another"
            head = (
                f"replace {u.phrase} at a fixed position of {where} (both valid: a rejected record "
                "takes no position); stream lengths public"
            )
        elif self.scope is Scope.ONE_STREAM:
            of_users = " of users" if u is Unit.USER_SET else ""
            head = f"add/remove {u.phrase} at any position of one stream{of_users}; stream length not public"
        else:
            rest = {Scope.MERGED_STREAMS: "stream", Scope.PARTITIONS: "partition", Scope.SHARD: "shard"}
            head = f"add/remove {u.phrase} in {self.scope.value}, every other {rest[self.scope]} unchanged"
        parts = [head + (f" ({'; '.join(self.references)})" if self.references else "")]
        if self.change is Change.ADD_REMOVE and self.scope is Scope.MERGED_STREAMS:
            rule = (
                "a hash of the item or user, time slices closed by punctuation"
                if u is Unit.EVENT
                else "a hash of the user"
            )
            parts.append(
                f"this covers {u.phrase} of the whole input only where the input was split into those "
                f"streams by a rule that does not depend on other {u.plural} ({rule}), never by position"
            )
        elif self.change is Change.ADD_REMOVE and self.scope is Scope.PARTITIONS:
            parts.append(
                f"this covers {u.phrase} of the whole input only where {u.plural} were assigned to "
                f"partitions by a rule that does not depend on other {u.plural}, never by position"
            )
        if self.epochs is not EpochKind.NONE:
            parts.append(_EPOCH_TEXT[self.epochs].format(noun=u.noun))
        parts.extend(c.render() for c in self.conditions)
        if self.change is Change.REPLACE:
            many = "" if self.group_size == 1 else f"covers {self.group_size} such replacements; "
            parts.append(
                f"{many}calibrated for the {self.steps} remove/add steps by group privacy ({_LEMMA_8_1})"
            )
        elif self.group_size > 1:
            parts.append(
                f"the guarantee covers neighbours {self.group_size} such steps apart (group privacy, {_LEMMA_8_1})"
            )
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able structured form (for logs and ``Release.to_dict``)."""
        return {
            "unit": self.unit.value,
            "change": self.change.value,
            "scope": self.scope.value,
            "group_size": self.group_size,
            "epochs": self.epochs.value,
            "conditions": [c.to_dict() for c in self.conditions],
            "references": list(self.references),
        }


_EPOCH_TEXT = {
    EpochKind.PUNCTUATED_TIME: (
        "per event-time epoch: each {noun}'s epoch is that of its own timestamp, and epochs close on the "
        "producer's public punctuations, never on the data"
    ),
    EpochKind.COUNT: (
        "per count epoch: count epochs cut each shard's stream by position, so only the replaced {noun}'s "
        "epoch changes"
    ),
}


class StatesRelation:
    """Mixin for records that carry a ``relation``: its text and privacy unit, rendered on demand."""

    relation: NeighbourRelation

    @property
    def neighbour_relation(self) -> str:
        """The relation's text (the edge: keep ``relation`` for anything but display)."""
        return self.relation.render()

    @property
    def privacy_unit(self) -> str:
        return self.relation.privacy_unit
