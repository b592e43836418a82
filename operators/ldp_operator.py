"""The ``ldp-heavy-hitters`` job's Flink operator (body in :mod:`privstream.operators.ldp_logic`).

:class:`LdpServerFunction` is keyed by one constant key (one HG-LDP server per deployment); its
keyed state is the whole server in two ``ValueState``s: the kept public-state versions
(:meth:`LdpServerLogic.versions_bytes`, compact, rewritten only when a version is made) and the rest
(:meth:`LdpServerLogic.core_bytes`, rewritten after every message); both are checkpointed with the
Kafka source offsets, so a restore replays the reports after the
checkpoint's offsets into exactly that server (with several partitions, possibly in another
interleaving than the failed attempt: :mod:`privstream.operators.ldp_logic`). Main output: ``LdpRelease`` bytes; side outputs:
the public state as ``Row(key, value)`` (:data:`STATE`) and dead letters (:data:`DEAD_LETTERS`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from privstream.operators.kafka_io import BYTES, KEYED_BYTES
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings
from privstream.operators.metrics import OperatorMetrics
from privstream.operators.sketch_operator import DEAD_LETTERS
from privstream.operators.test_hooks import TestHooks
from pyflink.common import Row
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

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
        # rebuilt from state after every restore; its first message re-announces the latest state
        self._logic: LdpServerLogic | None = None
        self._sizes = {"core": 0, "versions": 0}  #: bytes of the two states as last written
        self.metrics = OperatorMetrics.register(
            runtime_context,
            ("eventsCounted", "deadLettered", "releases"),
            {"stateBytes": lambda: sum(self._sizes.values())},
        )

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        if self._logic is None:
            core, versions = self.core.value(), self.versions.value()
            if core is None:
                self._logic = LdpServerLogic(self.settings)
                self.versions.update(self._logic.versions_bytes())
            else:
                self._logic = LdpServerLogic(self.settings, bytes(core), versions=bytes(versions))
        logic = self._logic
        before, reports = logic.latest_version, logic.server.n
        payload = b"" if value[0] is None else bytes(value[0])
        outputs = logic.process(payload, int(value[1]), int(value[2]), self.topic)
        # Both states are written before this element's outputs, so every checkpoint barrier (between
        # elements) sees a consistent pair; the versions only when one was made (every --state-every
        # reports at most), the small rest after every message.
        if logic.latest_version != before:
            versions = logic.versions_bytes()
            self.versions.update(versions)
            self._sizes["versions"] = len(versions)
        core = logic.core_bytes()
        self.core.update(core)
        self._sizes["core"] = len(core)
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
