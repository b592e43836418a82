"""The ``ldp-heavy-hitters`` job's Flink operator (body in :mod:`privstream.operators.ldp_logic`).

:class:`LdpServerFunction` is keyed by one constant key (one HG-LDP server per deployment); its
keyed state is the whole server in two ``ValueState``s: the kept public-state versions
(:meth:`LdpServerLogic.versions_bytes`, compact, rewritten only when a version is made) and the rest
(:meth:`LdpServerLogic.core_bytes`). The server itself lives in memory between messages (issue 25:
a message costs its reports, not a copy of the server): it is written to those states after every
message with an output (a release, a public state, a dead letter) and at least every
:data:`~privstream.operators.unflushed.FLUSH_EVERY` messages; the messages since are appended to a
``ListState`` (:class:`~privstream.operators.unflushed.UnflushedMessages`). All are checkpointed
with the Kafka source offsets, so a restore rebuilds exactly the server at the checkpoint (the
written bytes, then the messages since replayed: they had no output, and a report's decays depend
only on its number, so the replay applies them exactly as before) and the source replays the
reports after the checkpoint's offsets into it (with several partitions, possibly in another
interleaving than the failed attempt: :mod:`privstream.operators.ldp_logic`). The first message
after the replay re-announces the latest state, as after every restore. Main output: ``LdpRelease`` bytes; side outputs:
the public state as ``Row(key, value)`` (:data:`STATE`) and dead letters (:data:`DEAD_LETTERS`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from privstream.operators.kafka_io import BYTES, KEYED_BYTES
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings
from privstream.operators.metrics import OperatorMetrics
from privstream.operators.shard_operator import DEAD_LETTERS
from privstream.operators.test_hooks import TestHooks
from privstream.operators.unflushed import UnflushedMessages
from pyflink.common import Row, Types
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

STATE = OutputTag("ldp-state", KEYED_BYTES)

__all__ = ["DEAD_LETTERS", "STATE", "LdpServerFunction"]


class LdpServerFunction(KeyedProcessFunction):
    """Rows ``(payload, partition, offset)`` of the reports topic → releases, state, dead letters.
    ``hooks``: TESTS ONLY (an injected failure after ``fail_after`` applied reports), None in
    production."""

    def __init__(self, settings: LdpServerSettings, topic: str, hooks: TestHooks | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self.faults = (hooks or TestHooks()).faults  #: TESTS ONLY (never fails in production)
        self._sizes = {"core": 0, "versions": 0}
        self.metrics = OperatorMetrics.disabled()  # open() registers the real ones

    def open(self, runtime_context: RuntimeContext) -> None:
        self.core = runtime_context.get_state(ValueStateDescriptor("hg-ldp-core", BYTES))
        self.versions = runtime_context.get_state(ValueStateDescriptor("hg-ldp-versions", BYTES))
        #: (payload, partition, offset) of each message since the server was last written
        self.since = UnflushedMessages(
            runtime_context.get_list_state(ListStateDescriptor("since-write", Types.PICKLED_BYTE_ARRAY()))
        )
        # rebuilt from state after every restore; its first message re-announces the latest state
        self._logic: LdpServerLogic | None = None
        self._sizes = {"core": 0, "versions": 0}  #: bytes of the two states as last written
        self._written = -1  #: the latest version in the versions state (-1: none written yet)
        self.metrics = OperatorMetrics.register(
            runtime_context,
            ("eventsCounted", "deadLettered", "releases"),
            {"stateBytes": lambda: sum(self._sizes.values())},
        )

    def _restore(self) -> LdpServerLogic:
        """The server as written, then the messages since replayed (they had no outputs)."""
        core, versions = self.core.value(), self.versions.value()
        if core is None:
            return LdpServerLogic(self.settings)
        logic = LdpServerLogic(self.settings, bytes(core), versions=bytes(versions))
        self._written = logic.latest_version
        logic.announce = False  # the replayed messages announced nothing the first time
        for payload, partition, offset in self.since.restore(0):
            replayed = logic.process(payload, partition, offset, self.topic)
            assert not replayed, "a message with outputs is written at once, never replayed"
        logic.announce = True  # the first message after a restore re-announces the latest state
        return logic

    def _write(self, logic: LdpServerLogic) -> None:
        """Both states, the versions only when one was made since they were last written."""
        if logic.latest_version != self._written:
            versions = logic.versions_bytes()
            self.versions.update(versions)
            self._sizes["versions"] = len(versions)
            self._written = logic.latest_version
        core = logic.core_bytes()
        self.core.update(core)
        self._sizes["core"] = len(core)

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        if self._logic is None:
            self._logic = self._restore()
        logic = self._logic
        before, reports = logic.latest_version, logic.server.n
        payload = b"" if value[0] is None else bytes(value[0])
        partition, offset = int(value[1]), int(value[2])
        try:
            outputs = logic.process(payload, partition, offset, self.topic)
        except BaseException:
            self._logic = None  # never keep a server left half-changed by an error
            raise
        # The states are written (or the message appended) before this element's outputs, so every
        # checkpoint barrier (between elements) sees the server as of its last message.
        flush = bool(outputs) or logic.latest_version != before
        self.since.commit(0, (payload, partition, offset), flush, lambda: self._write(logic))
        self.metrics.inc("eventsCounted", logic.server.n - reports)  # reports applied
        self.faults.on_message(0, self._logic.server.n)
        key = self.settings.deployment.encode()
        for kind, data in outputs:
            if kind == "release":
                self.metrics.inc("releases")
                yield data
            elif kind == "state":
                yield STATE, Row(key, data)
            else:
                self.metrics.inc("deadLettered")
                yield DEAD_LETTERS, data
