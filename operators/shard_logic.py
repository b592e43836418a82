"""Per-shard sketching and the cross-shard epoch combine, free of Flink so they can be unit-tested.

:class:`ShardSketcher` is the body of the keyed sketch operator (one key = one shard = one Kafka
partition): it cuts each decoded message by epoch (:mod:`privstream.operators.epochs`), folds each
piece into that epoch's sketch (kept serialised in a store, which in Flink is keyed ``MapState``),
and when an epoch closes emits a :class:`ShardSketch` — *also for an epoch in which the shard saw
nothing* (an empty sketch), so the merge side never waits on data-dependent gaps.

:class:`EpochMerger` is the body of the combine operator
(:class:`~privstream.operators.combine_operator.EpochCombineFunction`): it collects
:class:`ShardSketch` messages from the configured number of shards and, once every shard has closed
epoch e, emits e's :class:`EpochReleaseInput`: :meth:`SketchSpec.combine` of the shard sketches of e
in shard-id order (a data-independent order, as Lebeda–Tětek Cor. 7.2 requires): per shard (the MG
default) the sketches themselves, unmerged; merged, their mergeable-summaries merge. A shard that
has closed e without sending a sketch for it contributed nothing (its sketch is empty). Epochs are
released contiguously, lowest first.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any, NamedTuple

from privstream.operators.epochs import FINAL, EpochPolicy, ShardProgress
from privstream.operators.payloads import Payload, UserSetPayload, WatermarkPayload
from privstream.operators.routing import routing_error
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.state_records import (
    MERGE_STATE,
    from_optional_ints,
    optional_ints,
    pack_merge_payload,
    unpack_merge_payload,
)

from privstream.sketches import SketchFormatError
from privstream.sketches.binary_format import decode_envelope, encode_envelope
from privstream.validation import check_int


class Misrouted(ValueError):
    """A message whose events the data-independent partitioner puts in another shard.

    Dropping such a message is not enough: which events reach the job would then depend on the
    producer's positional partitioning, and the events of the same message that *were* routed right
    would be dropped because of others. The shard therefore fails closed: the message is
    dead-lettered, the shard records the reason for good (:attr:`ShardProgress.misrouted`), and every
    epoch it closes from then on carries it, so the merge marks those epochs refused and nothing
    more is released (the release operator logs and ledgers the refusal, charging nothing).
    ``messages`` holds :meth:`ShardSketcher.refusal`: the progress message the operator must emit at
    once, so that epochs the merge still holds are refused too."""

    def __init__(self, reason: str, messages: Sequence[ShardSketch] = ()) -> None:
        super().__init__(reason)
        self.messages = list(messages)


class ShardSketch(NamedTuple):
    """A shard's closed epoch: ``data`` is the core sketch format (``None``: progress only).
    ``refused``: why no release may use this shard's sketches any more (see :class:`Misrouted`)."""

    shard: int
    epoch: int | None
    data: bytes | None
    closed_through: int
    refused: str | None = None


class EpochReleaseInput(NamedTuple):
    """Epoch ``epoch``'s release input from all ``shards`` (the job's shard count):
    :meth:`SketchSpec.combine` bytes, i.e. the shard sketches in shard order (per-shard release) or
    their fixed-order merge; ``refused``: why it must not be released (a shard saw a misrouted
    event), else ``None``."""

    epoch: int
    data: bytes
    shards: int
    refused: str | None = None


class ShardSketcher:
    """Sketches of one shard's open epochs, in ``store`` (epoch -> sketch bytes).

    ``live`` (the operator's in-memory cache, kept between messages): the open epochs' sketch
    objects. With it, a message updates the live sketch in O(events) and marks it dirty; nothing is
    serialised until :meth:`flush` (the operator flushes when an epoch closes and every few
    messages, and checkpoints the messages since the last flush: :mod:`~privstream.operators.sketch_operator`).
    Without it (None), every message loads and re-encodes its epochs' sketches, O(k) a message."""

    def __init__(
        self,
        shard: int,
        spec: SketchSpec,
        policy: EpochPolicy,
        store: MutableMapping[int, bytes],
        progress: ShardProgress,
        shards: int = 1,
        live: dict[int, Any] | None = None,
    ) -> None:
        self.shard = shard
        self.shards = shards
        self.spec = spec
        self.policy = policy
        self.store = store
        self.progress = progress
        self.live = live
        self.dirty: set[int] = set()  #: epochs whose live sketch changed since the last flush
        self.unreleased_events = 0  #: counted, but in epochs after the final one (see finish)
        self.late_reason = ""  #: why the last message's late events were not counted

    def _open_sketch(self, epoch: int) -> Any:
        """Epoch ``epoch``'s sketch: the live object, else loaded from the store (or new)."""
        sketch = None if self.live is None else self.live.get(epoch)
        if sketch is None:
            data = self.store.get(epoch)
            sketch = self.spec.load(data) if data is not None else self.spec.new()
            if self.live is not None:
                self.live[epoch] = sketch
        return sketch

    def flush(self) -> None:
        """Write the live sketches changed since the last flush to the store (their bytes are what a
        checkpoint holds)."""
        if self.live is not None:
            for epoch in sorted(self.dirty):
                if epoch in self.live:
                    self.store[epoch] = self.live[epoch].to_bytes()
        self.dirty.clear()

    def _take(self, epoch: int) -> bytes | None:
        """Remove epoch ``epoch``'s sketch (live and stored); its bytes, or None if it has none."""
        sketch = None if self.live is None else self.live.pop(epoch, None)
        data = self.store.pop(epoch, None)
        self.dirty.discard(epoch)
        return sketch.to_bytes() if sketch is not None else data

    def add(self, payload: Payload) -> tuple[list[ShardSketch], int]:
        """Count one message; returns the epochs it closed and how many of its events were late.

        A punctuation (``WatermarkPayload``) only advances the shard's clock: it may close epochs
        (time epochs; count epochs ignore it) and is never counted. A message with an event that the
        partitioner would not put in this shard raises :class:`Misrouted` before anything is counted."""
        reason = routing_error(payload, self.shard, self.shards, self.spec.shard_key or "item")
        if reason is not None:
            if self.progress.misrouted is None:
                self.progress.misrouted = f"partition {self.shard}: {reason}"
            raise Misrouted(reason, self.refusal())
        if isinstance(payload, WatermarkPayload):
            self.progress.punctuate(payload.watermark_ms)
            return self._close_through(self.policy.closable_through(self.progress)), 0
        if isinstance(payload, UserSetPayload):  # rejected before it takes a position (count epochs)
            self.spec.check_user_set(payload.items)
        split = self.policy.split(payload, self.progress)
        self.late_reason = split.late_reason
        for epoch, piece in split.pieces:
            sketch = self._open_sketch(epoch)
            self.spec.update(sketch, piece)
            if self.live is None:
                self.store[epoch] = sketch.to_bytes()
            else:
                self.dirty.add(epoch)
        return self._close_through(self.policy.closable_through(self.progress)), split.late

    def refusal(self) -> list[ShardSketch]:
        """A progress-only message carrying the shard's refusal, so that epochs this shard closed
        earlier but the merge still holds (waiting for other shards) are refused too; empty while
        the shard has closed nothing (its first closing message will carry the refusal)."""
        closed = self.progress.closed_through
        if closed is None or self.progress.misrouted is None:
            return []
        return [ShardSketch(self.shard, None, None, closed, self.progress.misrouted)]

    def finish(self) -> list[ShardSketch]:
        """End of input: close through the policy's public final epoch, drop what lies beyond it
        (counted in ``unreleased_events``) and mark the shard final."""
        out = self._close_through(self.policy.final_through(self.progress))
        for epoch in sorted(set(self.store.keys()) | set(self.live or ())):
            data = self._take(epoch)
            if data is not None:
                self.unreleased_events += self.spec.load(data).n
        self.progress.closed_through = FINAL
        out.append(ShardSketch(self.shard, None, None, FINAL, self.progress.misrouted))
        return out

    def _close_through(self, last: int | None) -> list[ShardSketch]:
        """Emit epochs ``first_epoch..last`` not yet closed, empty ones included
        (:meth:`ShardProgress.close_through`); a shard whose first punctuation closes nothing only
        reports progress, so the merge need not wait for it."""
        epochs = self.progress.close_through(last)
        if epochs is None:
            return []
        out = []
        for epoch in epochs:
            data = self._take(epoch) or self.spec.new().to_bytes()
            out.append(ShardSketch(self.shard, epoch, data, epoch, self.progress.misrouted))
        return out or [ShardSketch(self.shard, None, None, epochs.stop - 1, self.progress.misrouted)]


class MergeState(NamedTuple):
    """What the combine operator checkpoints: per-shard progress, the sketches of pending epochs,
    each shard's first epoch (known from its first message; ``FINAL`` for a shard that ended
    without any epoch), and why releases are refused from now on (the first shard refusal seen)."""

    closed: tuple[int | None, ...]
    pending: dict[int, dict[int, bytes]]
    next_epoch: int | None
    starts: tuple[int | None, ...]
    refused: str | None = None

    def to_bytes(self) -> bytes:
        """The core's binary envelope (:mod:`privstream.operators.state_records`), not pickle."""
        entries = sum(len(shards) for shards in self.pending.values())
        params = [len(self.closed), entries, *optional_ints([self.next_epoch]), int(self.refused is not None)]
        payload = pack_merge_payload(self.closed, self.starts, self.pending)
        return encode_envelope(MERGE_STATE, params, payload + (self.refused or "").encode())

    @classmethod
    def from_bytes(cls, data: bytes) -> MergeState:
        params, payload = decode_envelope(data, MERGE_STATE, 5, "MergeState")
        shards, entries, refused_flag = params[0], params[1], params[4]
        (next_epoch,) = from_optional_ints(params[2:4], 1)
        if shards < 1 or refused_flag not in (0, 1):
            raise SketchFormatError("bad MergeState record")
        closed, starts, pending, rest = unpack_merge_payload(payload, shards, entries)
        if rest and not refused_flag:
            raise SketchFormatError("trailing bytes in a MergeState record")
        return cls(tuple(closed), pending, next_epoch, tuple(starts), rest.decode() if refused_flag else None)


class EpochMerger:
    """Fixed-order merge of ``num_shards`` shard sketches per epoch."""

    def __init__(self, num_shards: int, spec: SketchSpec, state: MergeState | None = None) -> None:
        check_int("shards", num_shards, type_error=ValueError)
        self.num_shards = num_shards
        self.spec = spec
        self.state = state or MergeState((None,) * num_shards, {}, None, (None,) * num_shards)

    def add(self, msg: ShardSketch) -> list[EpochReleaseInput]:
        if not 0 <= msg.shard < self.num_shards:
            raise ValueError(
                f"shards: got a sketch from shard {msg.shard}, but the job has {self.num_shards} shards"
            )
        closed, starts = list(self.state.closed), list(self.state.starts)
        prev = closed[msg.shard]
        closed[msg.shard] = msg.closed_through if prev is None else max(prev, msg.closed_through)
        if starts[msg.shard] is None:  # the shard's first message says where its epochs start
            starts[msg.shard] = msg.epoch if msg.epoch is not None else min(msg.closed_through + 1, FINAL)
        pending = self.state.pending
        if msg.epoch is not None and msg.data is not None:
            pending.setdefault(msg.epoch, {})[msg.shard] = msg.data
        next_epoch = self.state.next_epoch
        if next_epoch is None and all(s is not None for s in starts):
            # the first epoch of the job: from every shard's first message (punctuation or position
            # only), never from which shard's data happened to arrive first
            first = min(starts)  # type: ignore[type-var]
            next_epoch = first if first < FINAL else None
        refused = self.state.refused or msg.refused
        self.state = MergeState(tuple(closed), pending, next_epoch, tuple(starts), refused)
        return list(self._complete())

    def _complete(self) -> Iterator[EpochReleaseInput]:
        closed, pending, next_epoch, starts, refused = self.state
        if next_epoch is None or any(c is None for c in closed):
            return
        through = min(c for c in closed if c is not None)
        if through >= FINAL:
            through = max(pending, default=next_epoch - 1)
        while next_epoch <= through:
            shard_data = pending.pop(next_epoch, {})
            data = self.spec.combine(shard_data, self.num_shards)
            yield EpochReleaseInput(next_epoch, data, self.num_shards, refused)
            next_epoch += 1
            self.state = MergeState(closed, pending, next_epoch, starts, refused)
