"""The HG-LDP server's Kafka loop: reports in, public state out, refusals dead-lettered.

:class:`LdpServerLoop` owns an :class:`~privstream.ldp.HgLdpServer`. It publishes the server's
public state to the compacted ``ldp-state`` topic (:class:`~privstream.connectors.ldp_state.StatePublisher`),
consumes ``ldp-reports`` and inserts each report with the state (version and digest) the client named
(:meth:`HgLdpServer.add` looks it up in the server's :class:`~privstream.ldp.StateHistory`), then
publishes the new state once per polled batch. A report it cannot use is never mixed in: it goes
to ``ldp-reports-dlq`` verbatim with the reason —

* ``stale-state (unknown)`` / ``stale-state (too-old)``: the version was never published, or is
  older than the server keeps (``max_lag`` versions);
* ``state digest mismatch``: the version exists, but the report's digest is not that of the state
  this server run published as it (another run's state, or none);
* ``inconsistent``: an output the named state makes impossible (e.g. a cold item in shrunk DSR);
* ``rejected``: another scheme, other parameters, a malformed payload, or another schema.

An ``LdpReportBatch`` message (``LdpProducer.submit_many``) is refused whole (one dead letter,
reason prefixed ``batch:``) or applied report by report, each refused report dead-lettered with the
batch's bytes and ``report <i> of <count> in the batch:`` — the policy of the Flink job
(:mod:`privstream.operators.ldp_logic`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from privstream.connectors.consume import DecodedRecord, RecordConsumer
from privstream.connectors.ldp_producer import batch_from_record, report_from_record
from privstream.connectors.ldp_state import LDP_STATE, StatePublisher
from privstream.connectors.topics import LDP_REPORTS

from privstream.ldp import HgLdpServer, PublicState, refusal_reason

logger = logging.getLogger(__name__)


class LdpServerLoop:
    """Consumes one deployment's reports into ``server`` and publishes its state (see module doc)."""

    def __init__(
        self,
        bootstrap: str,
        server: HgLdpServer,
        *,
        deployment: str,
        reports_topic: str = LDP_REPORTS,
        state_topic: str = LDP_STATE,
        group_id: str | None = None,
        **consumer_config: Any,
    ) -> None:
        if not isinstance(server, HgLdpServer):
            raise TypeError(f"server: expected HgLdpServer, got {type(server).__name__}")
        self.server = server
        self.applied = 0
        self.refused: Counter[str] = Counter()
        self.publisher = StatePublisher(
            bootstrap,
            deployment=deployment,
            scheme=server.scheme,
            parameters=server.params.public,
            topic=state_topic,
        )
        self.consumer = RecordConsumer(bootstrap, reports_topic, group_id=group_id, **consumer_config)

    def publish_state(self) -> PublicState:
        """Publish the server's current state (a new version only if it changed) and flush it."""
        state = self.server.public_state()
        if self.publisher.publish(state):
            self.publisher.flush()
            logger.debug("published %s state version %d", self.server.scheme, state.version)
        return state

    def _refuse(self, record: DecodedRecord, reason: str) -> None:
        self.refused[reason.split(":", 1)[0]] += 1
        self.consumer.dead_letter(record, record.raw, reason)

    def apply(self, record: DecodedRecord) -> bool:
        """Insert one decoded record's report (or each report of a batch, in order); dead-letter
        what is refused with the reason. True if a report was applied."""
        if record.schema == "LdpReportBatch":
            return self._apply_batch(record)
        if record.schema != "LdpReport":
            self._refuse(record, f"rejected: not an LdpReport ({record.schema})")
            return False
        try:
            self.server.add(report_from_record(record.value))
        except ValueError as exc:  # StaleStateError and InconsistentReportError included
            self._refuse(record, refusal_reason(exc))
            return False
        self.applied += 1
        return True

    def _apply_batch(self, record: DecodedRecord) -> bool:
        """Each report of an ``LdpReportBatch`` (:meth:`HgLdpServer.add_batch`); True if one applied."""
        before = self.applied

        def applied() -> None:
            self.applied += 1

        try:
            self.server.add_batch(
                batch_from_record(record.value),
                refused=lambda reason: self._refuse(record, reason),
                applied=applied,
            )
        except ValueError as exc:
            self._refuse(record, f"batch: {refusal_reason(exc)}")
            return False
        return self.applied > before

    def step(self, timeout_ms: int = 200) -> int:
        """Poll one batch, insert its reports, publish the new state; returns the records polled."""
        records = self.consumer.poll(timeout_ms=timeout_ms)
        for record in records:
            self.apply(record)
        if records:
            self.publish_state()
        return len(records)

    def run(self, until: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Step until ``until()`` holds (TimeoutError after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"LDP server: not done after {timeout_s:g} s ({self.applied} applied)")
            self.step()

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()

    def __enter__(self) -> LdpServerLoop:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
