"""The ``sliding-window`` job's Flink operator (body in :mod:`privstream.operators.window_logic`).

:class:`WindowShardFunction` is keyed by the Kafka partition (one key = one shard = one DPSW-Sketch,
Wang–Wang–Chen KDD 2024, Alg. 2). Its keyed ``ValueState`` is the shard sketch's versioned binary
state (:meth:`~privstream.window.DPSWSketch.to_bytes`). The sketch itself lives in memory between
messages (issue 25: O(events) per message, not O(state)): it is written to that state after every
message with an output (a release or a dead letter) and at least every
:data:`~privstream.operators.unflushed.FLUSH_EVERY` messages that changed it; the messages since are
appended to a ``ListState`` (:class:`~privstream.operators.unflushed.UnflushedMessages`). Both are
checkpointed with the Kafka source offsets, so a restore rebuilds exactly the sketch at the
checkpoint (the written bytes, the messages since replayed: they had no output) and the source
replays exactly the messages after it (the keyed noise redraws the same values; a new submission
resuming a savepoint re-keys it: :class:`~privstream.operators.window_logic.WindowShardLogic`). A
second ``ValueState`` holds the shard's binding (shard count, shard key, domain:
:meth:`~privstream.operators.window_logic.WindowSettings.binding`, which the sketch state does not
hold; written with the sketch state, checked on restore), a third the refusal reason once a
misrouted message was seen (fail closed). Main
output: ``WindowRelease`` bytes; side outputs: dead letters (:data:`DEAD_LETTERS`) and, for tests
only, the state after every release as ``SketchSnapshot`` bytes (:data:`STATES`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from privstream.operators.kafka_io import BYTES
from privstream.operators.metrics import OperatorMetrics
from privstream.operators.shard_operator import DEAD_LETTERS
from privstream.operators.test_hooks import TestHooks
from privstream.operators.unflushed import UnflushedMessages
from privstream.operators.window_logic import WindowSettings, WindowShardLogic
from pyflink.common import Types
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

#: TESTS ONLY: the sketch state after every release (NOT private: raw counters and the noise key)
STATES = OutputTag("window-states", BYTES)

__all__ = ["DEAD_LETTERS", "STATES", "WindowShardFunction"]


class WindowShardFunction(KeyedProcessFunction):
    """Rows ``(payload, partition, offset)`` of the events topic → releases and dead letters.
    ``hooks``: TESTS ONLY (an injected failure, the :data:`STATES` side output), None in production."""

    def __init__(self, settings: WindowSettings, topic: str, hooks: TestHooks | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self.hooks = hooks  #: TESTS ONLY (None in production)
        self.faults = (hooks or TestHooks()).faults
        self._sizes: dict[int, int] = {}
        self.metrics = OperatorMetrics.disabled()  # open() registers the real ones

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sketch = runtime_context.get_state(ValueStateDescriptor("dpsw-sketch", BYTES))
        self.refused = runtime_context.get_state(ValueStateDescriptor("refused", Types.STRING()))
        self.binding = runtime_context.get_state(ValueStateDescriptor("binding", Types.STRING()))
        #: (payload, offset) of each message that changed the sketch since it was last written
        self.since = UnflushedMessages(
            runtime_context.get_list_state(ListStateDescriptor("since-write", Types.PICKLED_BYTE_ARRAY()))
        )
        self._logic: dict[int, WindowShardLogic] = {}  # shard -> sketch; rebuilt after every restore
        self._sizes = {}  #: shard -> bytes of its sketch state as last written
        self.metrics = OperatorMetrics.register(
            runtime_context,
            ("eventsCounted", "deadLettered", "releases", "refusals"),
            {"stateBytes": lambda: sum(self._sizes.values())},
        )

    def _shard(self, shard: int) -> WindowShardLogic:
        logic = self._logic.get(shard)
        if logic is None:
            stored = self.sketch.value()
            state = None if stored is None else bytes(stored)
            binding = None if state is None else (self.binding.value() or "(none stored)")
            logic = WindowShardLogic(
                self.settings, shard, state, self.refused.value(), binding, hooks=self.hooks
            )
            for payload, offset in self.since.restore(shard):
                replayed = logic.process(payload, offset, self.topic)
                assert not replayed, "a message with outputs is written at once, never replayed"
            self._logic[shard] = logic
        return logic

    def _write(self, shard: int, logic: WindowShardLogic) -> None:
        state = logic.to_bytes()
        self.sketch.update(state)
        self._sizes[shard] = len(state)
        if self.binding.value() != logic.binding:
            self.binding.update(logic.binding)

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        shard = int(value[1])
        logic = self._shard(shard)
        payload = b"" if value[0] is None else bytes(value[0])
        seen, refused = (logic.sketch.items, logic.sketch.clock), logic.refused
        try:
            outputs = logic.process(payload, int(value[2]), self.topic)
        except BaseException:
            self._logic.pop(shard, None)  # never keep a sketch left half-changed by an error
            raise
        # items counted, or (event time) a punctuation moved the clock
        changed = (logic.sketch.items, logic.sketch.clock) != seen
        refusing = logic.refused != refused
        if changed or refusing:  # a refusal is written at once: a refusing shard replays nothing
            flush = bool(outputs) or refusing
            self.since.commit(shard, (payload, int(value[2])), flush, lambda: self._write(shard, logic))
        if refusing:
            self.refused.update(logic.refused)
            self.metrics.inc("refusals")  # the shard fails closed: it releases nothing more
        self.metrics.inc("eventsCounted", logic.sketch.items - seen[0])
        for kind, data in outputs:
            if kind == "release":
                self.metrics.inc("releases")
                yield data
            elif kind == "state":  # TESTS ONLY
                yield STATES, data
            else:
                self.metrics.inc("deadLettered")
                yield DEAD_LETTERS, data
        self.faults.on_message(shard, logic.sketch.items)
