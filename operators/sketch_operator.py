"""The heavy-hitters body of the sharded operator: one key per shard; keyed state = the sketches.

:class:`ShardSketchFunction` is the :class:`~privstream.operators.shard_operator.ShardFunction`
(decoding, dead letters, end of input, typed mode) whose shards hold epoch sketches: MG
(Lebeda–Tětek Alg. 1, item by item) or PAMG (Alg. 4, user set by user set), one per open epoch.

State (issue 25: O(events) per message, not O(k)): each shard's open sketches live in memory between
messages (:class:`ShardSketcher` with ``live``), and a message only updates them. They are
flushed — serialised into a ``MapState`` from epoch to the sketch (core binary format), with the
small progress record — when an epoch closes, the shard fails closed or ends, and at least every
:data:`~privstream.operators.unflushed.FLUSH_EVERY` messages; the messages since the last flush are
kept in a ``ListState`` (:class:`~privstream.operators.unflushed.UnflushedMessages`, each appended
once: O(its events)). The checkpointed state is therefore the flushed sketches,
the progress and the messages since, with the Kafka offsets. A restore rebuilds each shard's live
sketches from exactly that — the flushed sketches with the messages since replayed in order (a
message that closed an epoch or failed was flushed, so a replayed one emits nothing) — then the
source replays exactly the messages after the checkpoint: the same sketches, byte for byte, as a
run without the failure (tests/test_shard_flush.py). The work is in
:class:`~privstream.operators.shard_logic.ShardSketcher`; this class adapts it to Flink state.
"""

from __future__ import annotations

from privstream.operators.epochs import EpochPolicy, ShardProgress
from privstream.operators.payloads import Payload
from privstream.operators.shard_logic import ShardSketcher
from privstream.operators.shard_operator import MapStateStore, ShardFunction
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.test_hooks import TestHooks


class ShardSketchFunction(ShardFunction):
    """Per-shard epoch sketches; emits :class:`~privstream.operators.shard_logic.ShardSketch`
    tuples when epochs close. ``hooks``: TESTS ONLY, None in production; ``schedule``: see
    :class:`~privstream.operators.shard_operator.ShardFunction`."""

    def __init__(
        self,
        spec: SketchSpec,
        policy: EpochPolicy,
        topic: str,
        hooks: TestHooks | None = None,
        shards: int = 1,
        *,
        typed: bool = False,
        schedule: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(
            policy, topic, hooks, shards, user_sets=spec.user_sets, typed=typed, schedule=schedule
        )
        self.spec = spec

    def _sketcher(self, shard: int) -> ShardSketcher:
        """The shard's live sketcher; after a restore, rebuilt from the flushed sketches and progress
        with the messages since the last flush replayed into it (their outputs were emitted before
        the checkpoint: a message that closes an epoch or fails is always flushed, so a replayed one
        emits nothing)."""
        live: ShardSketcher | None = self._live.get(shard)
        if live is None:
            live = ShardSketcher(
                shard,
                self.spec,
                self.policy,
                MapStateStore(self.sketches, self._sizes.setdefault(shard, {})),
                ShardProgress.from_bytes(self.progress.value()),
                self.shards,
                live={},
            )
            for payload in self.since.restore(shard):
                live.add(payload)
            self._live[shard] = live
        return live

    def _commit(self, sketcher: ShardSketcher, payload: Payload | None, flush: bool) -> None:
        """After a message: flush the live sketches and the progress to Flink state when ``flush``
        (an epoch closed, the shard failed closed or ended), or every
        :data:`~privstream.operators.unflushed.FLUSH_EVERY` messages; else only record the message
        among those since the last flush (O(events), not O(k))."""

        def write() -> None:
            sketcher.flush()
            self.progress.update(sketcher.progress.to_bytes())

        self.since.commit(sketcher.shard, payload, flush, write)
