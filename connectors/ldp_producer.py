"""The LDP client's transport: randomise each value on the client, send only the report.

:class:`LdpProducer` owns a :class:`privstream.ldp.LocalRandomiser`. :meth:`LdpProducer.submit`
takes a raw value, randomises it *in this process* and sends the resulting
:class:`privstream.ldp.LdpReport` (Avro ``LdpReport``) to ``ldp-reports``; the raw value is never
encoded. :meth:`LdpProducer.submit_many` takes many raw values, randomises each independently (the
randomiser's vectorised :meth:`~privstream.ldp.LocalRandomiser.encode_many`, exact, from the same
CSPRNG) against one public state, and sends them as ONE Avro ``LdpReportBatch`` message (the header
once, the fixed-width payloads concatenated in submission order: one ``bytes`` copy to encode and
one ``numpy.frombuffer`` to decode, where ``array<bytes>`` costs a Python object and an Avro length
prefix per report). ``submit`` and ``submit_many`` are the producer's only sending methods: they
do not take reports, bytes or payloads, so no caller can put a hand-built report (which could carry
a raw value) on the wire. Messages carry no key (a key would link reports).

HG-LDP clients (:class:`privstream.ldp.HgLdpClient`: BGR, DSR, BDR, CNR) randomise against the
server's public state: the producer follows the deployment's state on the compacted ``ldp-state``
topic (:class:`~privstream.connectors.ldp_state.StateReader`), waits for the first state, picks up
newer states before each report or batch (the deployment's latest record, not the highest version:
:mod:`~privstream.connectors.ldp_state`), and the report (every report of a batch) names the version
and digest it used: a batch is randomised against one state, the state is refreshed between
batches. The state is public; the raw value still never leaves :meth:`LdpProducer.submit` or
:meth:`LdpProducer.submit_many`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from privstream.connectors.avro_codec import default_registry
from privstream.connectors.clients import ProducerHandle, kafka_producer
from privstream.connectors.ldp_state import LDP_STATE, StateReader
from privstream.connectors.topics import LDP_REPORTS

from privstream.ldp import HgLdpClient, LdpReport, LocalRandomiser, PublicState
from privstream.ldp.randomiser import LdpReportBatch


def report_to_record(report: LdpReport) -> dict[str, Any]:
    """The Avro ``LdpReport`` record for a report."""
    if not isinstance(report, LdpReport):
        raise TypeError(f"report: only LdpReport objects can be encoded, got {type(report).__name__}")
    return {
        "scheme": report.scheme,
        "parameters": dict(report.parameters),
        "state_version": report.state_version,
        "payload": report.payload,
        "report_time": report.report_time_ms,
        "state_digest": report.state_digest,
    }


def report_from_record(record: dict[str, Any]) -> LdpReport:
    """Rebuild a report from a decoded Avro ``LdpReport`` record (server side)."""
    return LdpReport(
        scheme=record["scheme"],
        parameters=LdpReport.canonical_parameters(record["parameters"]),
        payload=record["payload"],
        state_version=record["state_version"],
        report_time_ms=record["report_time"],
        state_digest=record.get("state_digest") or b"",  # v1 messages: the default decodes as ""
    )


def batch_to_record(batch: LdpReportBatch) -> dict[str, Any]:
    """The Avro ``LdpReportBatch`` record for a batch."""
    if not isinstance(batch, LdpReportBatch):
        raise TypeError(f"batch: only LdpReportBatch objects can be encoded, got {type(batch).__name__}")
    return {
        "scheme": batch.scheme,
        "parameters": dict(batch.parameters),
        "state_version": batch.state_version,
        "state_digest": batch.state_digest,
        "report_time": batch.report_time_ms,
        "count": batch.count,
        "payloads": batch.payloads,
    }


def batch_from_record(record: dict[str, Any]) -> LdpReportBatch:
    """Rebuild a batch from a decoded Avro ``LdpReportBatch`` record (server side; ValueError if
    ``count`` and the payload bytes disagree)."""
    return LdpReportBatch(
        scheme=record["scheme"],
        parameters=LdpReport.canonical_parameters(record["parameters"]),
        payloads=record["payloads"],
        count=record["count"],
        state_version=record["state_version"],
        report_time_ms=record["report_time"],
        state_digest=record["state_digest"],
    )


class LdpProducer(ProducerHandle):
    """Sends locally randomised reports of one randomiser to ``topic`` (default ``ldp-reports``).

    For an HG-LDP client, ``deployment`` names the server whose state (on ``state_topic``) the
    client randomises against; the constructor waits up to ``state_timeout_s`` for its first state
    and refuses a state published with other parameters than the client's."""

    def __init__(
        self,
        bootstrap: str,
        randomiser: LocalRandomiser,
        topic: str = LDP_REPORTS,
        *,
        deployment: str | None = None,
        state_topic: str = LDP_STATE,
        state_timeout_s: float = 10.0,
        **producer_config: Any,
    ) -> None:
        if not isinstance(randomiser, LocalRandomiser):
            raise TypeError(f"randomiser: expected a LocalRandomiser, got {type(randomiser).__name__}")
        self.topic = topic
        self.randomiser = randomiser
        self.reports_sent = 0
        self._registry = default_registry()
        self._state: StateReader | None = None
        if isinstance(randomiser, HgLdpClient):
            if not deployment:
                raise ValueError("deployment: an HG-LDP client needs the deployment id of its server")
            self._state = StateReader(
                bootstrap, deployment=deployment, scheme=randomiser.scheme, topic=state_topic
            )
            try:
                self._adopt(self._state.wait(state_timeout_s))
            except Exception:
                self._state.close()
                raise
        self._producer = kafka_producer(bootstrap, **producer_config)

    def _adopt(self, state: PublicState) -> None:
        """Use ``state`` if the server published it with the client's parameters (checked for every
        new version: a redeployed server with other parameters is refused, never randomised against)."""
        assert self._state is not None and isinstance(self.randomiser, HgLdpClient)
        if self._state.parameters != self.randomiser.parameters:
            raise ValueError(
                f"parameters: deployment {self._state.deployment!r} publishes other parameters than the client's"
            )
        self.randomiser.update_state(state)

    def _follow_state(self) -> None:
        """Adopt the deployment's latest state record if it is new (non-blocking)."""
        if self._state is not None:
            latest = self._state.refresh()
            if latest is not None and latest is not getattr(self.randomiser, "state", None):
                self._adopt(latest)

    def submit(self, value: Any) -> None:
        """Randomise ``value`` locally (this producer's randomiser) and send only its report."""
        self._follow_state()
        report = self.randomiser.encode(value)
        self._producer.send(self.topic, value=self._registry.encode("LdpReport", report_to_record(report)))
        self.reports_sent += 1

    def submit_many(self, values: Sequence[Any] | np.ndarray) -> None:
        """Randomise every value locally and independently, in order, against the latest public
        state (one state for all), and send only the reports, as one ``LdpReportBatch`` message."""
        self._follow_state()
        batch = self.randomiser.encode_many(values)
        self._producer.send(self.topic, value=self._registry.encode("LdpReportBatch", batch_to_record(batch)))
        self.reports_sent += batch.count

    def close(self, timeout: float | None = None) -> None:
        if self._state is not None:
            self._state.close()
        super().close(timeout)
