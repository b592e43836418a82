"""The LDP client's transport: randomise each value on the client, send only the report.

:class:`LdpProducer` owns a :class:`privstream.ldp.LocalRandomiser`. :meth:`LdpProducer.submit`
takes a raw value, randomises it *in this process* and sends the resulting
:class:`privstream.ldp.LdpReport` (Avro ``LdpReport``) to ``ldp-reports``; the raw value is never
encoded. ``submit`` is the producer's only sending method: it does not take reports, bytes or
payloads, so no caller can put a hand-built report (which could carry a raw value) on the wire.
Messages carry no key (a key would link reports).

HG-LDP clients (:class:`privstream.ldp.HgLdpClient`: BGR, DSR, BDR, CNR) randomise against the
server's public state: the producer follows the deployment's state on the compacted ``ldp-state``
topic (:class:`~privstream.connectors.ldp_state.StateReader`), waits for the first state, picks up
newer states before each report (the deployment's latest record, not the highest version:
:mod:`~privstream.connectors.ldp_state`), and the report names the version and digest it used. The state is public;
the raw value still never leaves :meth:`LdpProducer.submit`.
"""

from __future__ import annotations

from typing import Any

from privstream.connectors.avro_codec import default_registry
from privstream.connectors.clients import ProducerHandle, kafka_producer
from privstream.connectors.ldp_state import LDP_STATE, StateReader
from privstream.connectors.topics import LDP_REPORTS

from privstream.ldp import HgLdpClient, LdpReport, LocalRandomiser, PublicState


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

    def submit(self, value: Any) -> None:
        """Randomise ``value`` locally (this producer's randomiser) and send only its report."""
        if self._state is not None:
            latest = self._state.refresh()
            if latest is not None and latest is not getattr(self.randomiser, "state", None):
                self._adopt(latest)
        report = self.randomiser.encode(value)
        self._producer.send(self.topic, value=self._registry.encode("LdpReport", report_to_record(report)))
        self.reports_sent += 1

    def close(self, timeout: float | None = None) -> None:
        if self._state is not None:
            self._state.close()
        super().close(timeout)
