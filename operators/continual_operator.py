"""The continual-monitor job's Flink operators (bodies in :mod:`privstream.operators.continual_logic`).

:class:`ContinualNodeFunction` is the keyed node operator (one key = one node = one partition of
the events topic). It is the sharded operator
(:class:`~privstream.operators.shard_operator.ShardFunction`, as the heavy-hitters shard sketches
are) with a node as each shard's body: the same decoding, dead letters, end of input
(``EndMarker`` or the final watermark) and test faults; its keyed state is the open steps' items
(``MapState`` of
:class:`~privstream.operators.continual_logic.OpenSteps`: one entry per message and step, so a
message writes its own events, not its step so far), the punctuation clock and the
node protocol's state (PCC with its secret noise key, Last(x)), all checkpointed with the Kafka
offsets, so a restore replays exactly the messages after the checkpoint into exactly that state
(and the keyed noise redraws the same values). Its output is ``ContinualUpdate`` bytes for the
updates topic. :class:`ContinualAggregatorFunction` (one key) reads the updates topic and emits
``Release`` bytes, and dead-letters updates of other runs (:class:`~privstream.operators.continual_logic.ForeignUpdate`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from privstream.connectors.avro_codec import decode
from privstream.operators.continual_logic import (
    ContinualAggregator,
    ContinualNode,
    ContinualSettings,
    OpenSteps,
)
from privstream.operators.epochs import ShardProgress
from privstream.operators.kafka_io import BYTES
from privstream.operators.metrics import OperatorMetrics
from privstream.operators.shard_operator import DEAD_LETTERS, MapStateStore, ShardFunction
from privstream.operators.test_hooks import TestHooks
from pyflink.common import Types
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

logger = logging.getLogger(__name__)


class ContinualNodeFunction(ShardFunction):
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
        """``typed``/``schedule``: the public operator's input (:class:`~privstream.operators.shard_operator.TypedEvent`
        rows, the nodes' clock from Punctuation elements or a declared schedule), as for the sketch
        operator."""
        super().__init__(
            settings.policy, topic, hooks, settings.nodes, user_sets=False, typed=typed, schedule=schedule
        )
        self.settings = settings
        self.hooks = hooks

    def open(self, runtime_context: RuntimeContext) -> None:
        super().open(runtime_context)
        self.protocol = runtime_context.get_state(ValueStateDescriptor("node-protocol", BYTES))
        self.step_pieces = runtime_context.get_map_state(
            MapStateDescriptor("open-step-pieces", Types.STRING(), BYTES)
        )
        #: node -> its open steps over ``step_pieces`` (which knows its pieces without reading the
        #: keys again); reset by every restore (open() runs again)
        self.open_steps: dict[int, OpenSteps] = {}
        #: node -> (its protocol state bytes, that state restored), kept between messages so the
        #: state is not deserialised for every one; reset by every restore (open() runs again)
        self.loaded: dict[int, tuple[bytes | None, Any]] = {}

    def _commit(self, sketcher: Any, payload: Any, flush: bool) -> None:
        """Every message: the node's progress (its protocol and open steps write their own state)."""
        self.progress.update(sketcher.progress.to_bytes())

    def _state_bytes(self) -> int:
        """The ``stateBytes`` gauge: the open steps and progress, plus the protocol states."""
        return super()._state_bytes() + sum(len(b) for b, _ in self.loaded.values() if b is not None)

    def _sketcher(self, shard: int) -> Any:
        value = self.protocol.value()
        state = None if value is None else bytes(value)
        cached = self.loaded.get(shard)
        steps = self.open_steps.get(shard)
        if steps is None:
            steps = OpenSteps(MapStateStore(self.step_pieces, self._sizes.setdefault(shard, {})))
            self.open_steps[shard] = steps
        node = _SavingNode(
            shard,
            self.settings,
            state,
            steps,
            ShardProgress.from_bytes(self.progress.value()),
            cached[1] if cached is not None and cached[0] == state else None,
            self.hooks,
        )
        node.state, node.loaded = self.protocol, self.loaded
        self.loaded[shard] = (state, node._protocol)
        return node


class _SavingNode(ContinualNode):
    """A node that writes its protocol state back to Flink state (and to the operator's cache of
    restored protocols) whenever steps close."""

    state: Any
    loaded: dict[int, tuple[bytes | None, Any]]

    def _close_through(self, last: int | None) -> list[bytes]:
        kept = self.loaded.pop(self.node, None)  # never reuse a protocol left half-changed by an error
        out = super()._close_through(last)
        if out:
            state = self.protocol_bytes()
            self.state.update(state)
            self.loaded[self.node] = (state, self._protocol)
        elif kept is not None:
            self.loaded[self.node] = kept
        return out


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
