"""The continual-monitor job's Flink operators (bodies in :mod:`privstream.operators.continual_logic`).

:class:`ContinualNodeFunction` is the keyed node operator (one key = one node = one partition of
the events topic). It is the heavy-hitters sketch operator with the node in place of the shard
sketcher: the same decoding, dead letters, end of input (``EndMarker`` or the final watermark),
test faults and state handling (issue 25: the node lives in memory between messages and is
written when Flink needs it, at most :data:`~privstream.operators.unflushed.FLUSH_EVERY` messages
apart, the messages since kept in a list); its keyed state is the open steps' items
(``MapState``), the punctuation clock, the node protocol's state (PCC with its secret noise key,
Last(x)) and the messages since the last write, all checkpointed with the Kafka offsets, so a
restore replays exactly the messages after the checkpoint into exactly that state (and the keyed
noise redraws the same values). Its output is ``ContinualUpdate`` bytes for the
updates topic. :class:`ContinualAggregatorFunction` (one key) reads the updates topic and emits
``Release`` bytes, and dead-letters updates of other runs (:class:`~privstream.operators.continual_logic.ForeignUpdate`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from privstream.connectors.avro_codec import decode
from privstream.operators.continual_logic import ContinualAggregator, ContinualNode, ContinualSettings
from privstream.operators.epochs import ShardProgress
from privstream.operators.kafka_io import BYTES
from privstream.operators.metrics import OperatorMetrics
from privstream.operators.sketch_operator import DEAD_LETTERS, ShardSketchFunction, _MapStateStore
from privstream.operators.test_hooks import TestHooks
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

logger = logging.getLogger(__name__)


class _EventsOnly:
    """What the inherited decoding needs of a sketch spec: nodes read events, not user sets."""

    user_sets = False


class ContinualNodeFunction(ShardSketchFunction):
    """Per-node time steps and protocol; emits ``ContinualUpdate`` bytes as steps close. ``hooks``:
    TESTS ONLY (seeded noise keys, an injected failure), None in production."""

    def __init__(
        self,
        settings: ContinualSettings,
        topic: str,
        hooks: TestHooks | None = None,
        *,
        typed: bool = False,
        schedule: tuple[int, int] | None = None,
    ) -> None:
        """``typed``/``schedule``: the public operator's input (:class:`~privstream.operators.sketch_operator.TypedEvent`
        rows, the nodes' clock from Punctuation elements or a declared schedule), as for the sketch
        operator."""
        super().__init__(
            _EventsOnly(),  # type: ignore[arg-type]
            settings.policy,
            topic,
            hooks,
            settings.nodes,
            typed=typed,
            schedule=schedule,
        )
        self.settings = settings
        self.hooks = hooks

    def open(self, runtime_context: RuntimeContext) -> None:
        super().open(runtime_context)
        self.protocol = runtime_context.get_state(ValueStateDescriptor("node-protocol", BYTES))
        self._protocol_size = 0  #: bytes of the protocol state last written (the stateBytes gauge)

    def _state_bytes(self) -> int:
        """The ``stateBytes`` gauge: the open steps and progress, plus the protocol state."""
        return super()._state_bytes() + self._protocol_size

    def _sketcher(self, shard: int) -> Any:
        """The node's live state (issue 25: O(events) per message): the protocol and the open steps'
        items stay in memory between messages and are written with the progress when the inherited
        ``_commit`` flushes (a step closed, the input ended, or every
        :data:`~privstream.operators.unflushed.FLUSH_EVERY` messages); the messages since are in the
        ``since-flush`` list. After a restore the node is rebuilt from exactly that: the written
        protocol, steps and progress, then the messages since, replayed (they emit nothing: a
        message that closed a step was flushed at once)."""
        live = self._live.get(shard)
        if live is None:
            value = self.protocol.value()
            store = _MapStateStore(self.sketches, self._sizes.setdefault(shard, {}))
            live = _LiveNode(
                shard,
                self.settings,
                None if value is None else bytes(value),
                {epoch: bytearray(store[epoch]) for epoch in store},
                ShardProgress.from_bytes(self.progress.value()),
                hooks=self.hooks,
            )
            live.attach(store, self)
            for payload in self.since.restore(shard):
                replayed, _ = live.add(payload)
                assert not replayed, "a message that closed a step is written at once, never replayed"
            self._live[shard] = live
        return live

    def _write_protocol(self, state: bytes) -> None:
        self.protocol.update(state)
        self._protocol_size = len(state)


class _LiveNode(ContinualNode):
    """A node held in memory between messages, its open steps as bytearrays that messages extend in
    place; :meth:`flush` writes the open steps changed since the last flush (each whole: a flush
    costs O(the open steps), at most every FLUSH_EVERY messages), removes the closed ones and, if
    steps closed since, writes the protocol state to the operator's Flink state."""

    def attach(self, store: Any, operator: ContinualNodeFunction) -> None:
        self._store, self._operator = store, operator
        self._changed: set[int] = set()
        self._protocol_changed = False

    def _new_step(self, items: bytes) -> bytes:
        return bytearray(items)

    def add(self, payload: Any) -> tuple[list[bytes], int]:
        before = {epoch: len(items) for epoch, items in self.steps.items()}
        out = super().add(payload)
        self._changed |= {e for e, items in self.steps.items() if before.get(e) != len(items)}
        return out

    def _close_through(self, last: int | None) -> list[bytes]:
        out = super()._close_through(last)
        self._protocol_changed = self._protocol_changed or bool(out)
        return out

    def flush(self) -> None:
        store = self._store
        for epoch in [e for e in store if e not in self.steps]:  # closed (or, at the end, dropped)
            del store[epoch]
        for epoch in sorted(self._changed & self.steps.keys()):
            store[epoch] = bytes(self.steps[epoch])
        self._changed.clear()
        if self._protocol_changed:
            self._operator._write_protocol(self.protocol_bytes())
            self._protocol_changed = False


class ContinualAggregatorFunction(KeyedProcessFunction):
    """The aggregator over the updates topic's rows ``(payload, partition, offset)``; updates that
    are not this run's (e.g. an earlier run's leftovers on ``topic``) go to the side output
    ``DEAD_LETTERS`` with the reason (the first one is logged)."""

    def __init__(self, settings: ContinualSettings, topic: str = "") -> None:
        self.settings = settings
        self.topic = topic
        self.foreign = 0
        self._state_size = 0
        self.metrics = OperatorMetrics.disabled()  # open() registers the real ones

    def open(self, runtime_context: RuntimeContext) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("aggregator", BYTES))
        self._aggregator: ContinualAggregator | None = None  # rebuilt from state after every restore
        self._state_size = 0  #: bytes of the aggregator state last written (the stateBytes gauge)
        self.metrics = OperatorMetrics.register(
            runtime_context, ("deadLettered", "releases"), {"stateBytes": lambda: self._state_size}
        )

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[bytes]:
        if self._aggregator is None:
            stored = self.state.value()
            self._aggregator = ContinualAggregator(self.settings, None if stored is None else bytes(stored))
        out, letters = self._aggregator.take(
            bytes(value[0]), topic=self.topic, partition=value[1], offset=value[2]
        )
        if letters:
            self.foreign += 1
            if self.foreign == 1:
                logger.warning(
                    "%s[%s]@%s dead-lettered: %s",
                    self.topic,
                    value[1],
                    value[2],
                    decode(letters[0])[1]["error"],
                )
            self.metrics.inc("deadLettered", len(letters))
            yield from ((DEAD_LETTERS, letter) for letter in letters)
            return
        state = self._aggregator.to_bytes()
        self.state.update(state)
        self._state_size = len(state)
        self.metrics.inc("releases", len(out))
        yield from out
