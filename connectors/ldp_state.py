"""The HG-LDP public state on Kafka: Avro ``HgLdpState`` records on a compacted topic.

The server (:mod:`privstream.connectors.ldp_server`) publishes its
:class:`~privstream.ldp.PublicState` keyed by the deployment id to ``ldp-state`` (log-compacted:
the latest record per key is the state); clients (:class:`~privstream.connectors.ldp_producer.LdpProducer`)
read the latest one with :class:`StateReader` and tag every report with its version and digest.
The state is a function of earlier randomised reports and warm-up data, so publishing it costs no
privacy.

**Which state a client uses.** The deployment's *latest record* on the topic (the highest offset:
what compaction keeps), never the highest version number seen. Version numbers are counters of one
server run: a server started afresh (no restore) on existing topics publishes a new version 0
while the old run's higher versions are still on the topic, and after a failure the replay may
publish a version with other contents than the aborted attempt did (which tansu shows to
``read_committed`` readers). Each record carries the run id and the digest of its contents
(:func:`~privstream.ldp.hg_state.state_digest`); a record whose digest does not match its contents,
or that has none (``HgLdpState.v1``), is skipped with a warning. A report against a state the server
did not publish in its current run is dead-lettered ("state digest mismatch", or "stale-state
(unknown)" for a version it never made), never mixed in; the Flink job then re-announces its latest
state (on its first message after a start or restore, and after every ``--state-every`` refused
reports), so clients stuck on such a record move back to a state it holds (docs/ldp.md).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from privstream.connectors.avro_codec import default_registry
from privstream.connectors.clients import ProducerHandle, kafka_producer
from privstream.connectors.consume import RecordConsumer

from privstream.ldp import PublicState

logger = logging.getLogger(__name__)

LDP_STATE = "ldp-state"


def state_to_record(
    state: PublicState, *, deployment: str, scheme: str, parameters: dict[str, str]
) -> dict[str, Any]:
    """The Avro ``HgLdpState`` record of ``state``."""
    return {
        "deployment": deployment,
        "scheme": scheme,
        "parameters": dict(parameters),
        "version": state.version,
        "hot_items": list(state.hot_items),
        "weakest_low": state.weakest_low,
        "dsr_mode": state.dsr_mode,
        "published_time": int(time.time() * 1000),
        "run_id": state.run_id,
        "digest": state.digest,
    }


def state_from_record(record: dict[str, Any]) -> PublicState:
    """The :class:`PublicState` of a decoded ``HgLdpState`` record (ValueError unless its DSR mode
    agrees and its digest is that of its run id, version and contents)."""
    # the defaults of v1 messages decode as "" (falsy): no run id, no digest
    run_id, digest = record.get("run_id") or b"", record.get("digest") or b""
    state = PublicState(record["version"], tuple(record["hot_items"]), record["weakest_low"], run_id)
    if state.dsr_mode != record["dsr_mode"]:
        raise ValueError(f"dsr_mode: {record['dsr_mode']!r} contradicts weakest_low={state.weakest_low}")
    if not digest or not state.run_id:
        raise ValueError(f"digest: version {state.version} has no run id or digest (a server before digests)")
    if digest != state.digest:
        raise ValueError(f"digest: version {state.version}'s digest does not match its run id and contents")
    return state


class StatePublisher(ProducerHandle):
    """Publishes one deployment's states (keyed by the deployment id, so compaction keeps the latest)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        deployment: str,
        scheme: str,
        parameters: dict[str, str],
        topic: str = LDP_STATE,
    ) -> None:
        if not isinstance(deployment, str) or not deployment:
            raise ValueError(f"deployment: expected a non-empty str, got {deployment!r}")
        self.topic = topic
        self.deployment = deployment
        self.scheme = scheme
        self.parameters = dict(parameters)
        self.published: PublicState | None = None
        self._registry = default_registry()
        self._producer = kafka_producer(bootstrap)

    def publish(self, state: PublicState) -> bool:
        """Send ``state`` unless it is the state published last; True if sent."""
        if self.published == state:
            return False
        record = state_to_record(
            state, deployment=self.deployment, scheme=self.scheme, parameters=self.parameters
        )
        self._producer.send(
            self.topic, key=self.deployment.encode(), value=self._registry.encode("HgLdpState", record)
        )
        self.published = state
        return True


class StateReader:
    """Follows a deployment's state on the compacted topic: its latest valid record (module doc)."""

    def __init__(self, bootstrap: str, *, deployment: str, scheme: str, topic: str = LDP_STATE) -> None:
        self.deployment = deployment
        self.scheme = scheme
        # short fetch waits: a non-blocking refresh before each report then sees new versions soon;
        # read_committed: on Kafka a state the Flink job published in an aborted transaction is never
        # used (tansu may still show it: a report against it is refused by its digest unless the
        # replay published the same state, operators/ldp_logic.py)
        self._consumer = RecordConsumer(
            bootstrap,
            topic,
            start="earliest",
            dead_letters=False,
            fetch_max_wait_ms=20,
            isolation_level="read_committed",
        )
        self._latest: PublicState | None = None
        self._parameters: dict[str, str] | None = None

    def refresh(self, timeout_ms: int = 0) -> PublicState | None:
        """Read what has arrived (waiting up to ``timeout_ms``) and return the state of the
        deployment's latest valid record (module docstring: the latest offset, not the highest
        version; ValueError if that record is of another scheme)."""
        newest: tuple[dict[str, Any], PublicState] | None = None
        for record in self._consumer.poll(timeout_ms=timeout_ms):
            value = record.value
            if record.schema != "HgLdpState" or value["deployment"] != self.deployment:
                continue
            try:
                newest = value, state_from_record(value)
            except ValueError as exc:
                logger.warning("skipping a state record of deployment %r: %s", self.deployment, exc)
        if newest is not None:
            value, state = newest
            if value["scheme"] != self.scheme:
                raise ValueError(
                    f"scheme: deployment {self.deployment!r} runs {value['scheme']!r}, not {self.scheme!r}"
                )
            if self._latest is not None and state.run_id != self._latest.run_id:
                logger.info(
                    "deployment %r: state of another server run (version %d)", self.deployment, state.version
                )
            self._latest, self._parameters = state, dict(value["parameters"])
        return self._latest

    def wait(self, timeout_s: float = 10.0) -> PublicState:
        """The newest state, waiting until one has been published (TimeoutError after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while (state := self.refresh(timeout_ms=200)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no {self.scheme} state of deployment {self.deployment!r} after {timeout_s:g} s"
                )
        return state

    @property
    def parameters(self) -> dict[str, str] | None:
        """The public parameters the server published with its state."""
        return None if self._parameters is None else dict(self._parameters)

    def close(self) -> None:
        self._consumer.close()
