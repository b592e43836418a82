"""The heavy-hitters job as an object: :class:`HeavyHittersJob` ``(config).run()``.

::

    from datetime import timedelta
    from privstream.jobs.job import HeavyHittersConfig, HeavyHittersJob

    config = HeavyHittersConfig(epsilon=1.0, delta=1e-6, k=64, epoch=timedelta(seconds=60),
                                bootstrap="127.0.0.1:9092", topic="events", stop_at_end_markers=True)
    HeavyHittersJob(config).run()        # checks Kafka and the jars, reads the ledger, runs to the end
    client = HeavyHittersJob(config).start()   # the same, asynchronously: a PyFlink JobClient
    HeavyHittersJob(config).build(env)   # or add the pipeline to an environment of your own

The command line (:mod:`privstream.jobs.heavy_hitters`) parses its options into the same config.
Everything that can fail on the input is checked before Flink starts: the config when it is built,
then (``prepare``) the connector jars, the topic and its partitions against the broker, the stopping
offsets (and the ``EndMarker`` scan), and the ledger topic, read to its end by the fence protocol
(:func:`~privstream.connectors.ledger_topic.read_ledger`), from which the job starts so that it
never forgets spent budget; if that read fails the job refuses to start
(:class:`~privstream.connectors.ledger_topic.LedgerUnavailable`).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from privstream.jobs.config import ConfigError, HeavyHittersConfig, TestHooks
from privstream.jobs.pipeline import build_pipeline, create_environment

__all__ = ["ConfigError", "HeavyHittersConfig", "HeavyHittersJob", "KafkaInputs", "TestHooks"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaInputs:
    """What the broker says before the job starts."""

    shards: int  #: partitions of the events topic
    stop_offsets: dict[int, int] | None  #: where the bounded run stops (None: unbounded)
    initial_ledger: bytes  #: the ledger state read from the ledger topic to its end (``read_ledger``)


class HeavyHittersJob:
    """The heavy-hitters Flink job for a validated :class:`HeavyHittersConfig`.

    ``hooks`` are TESTS ONLY (deterministic noise, an injected failure, the pre-noise sketches
    topic); no command-line option sets them. Each :meth:`build` reads Kafka afresh (the ledger above all), so one job object can run twice."""

    def __init__(
        self, config: HeavyHittersConfig, *, hooks: TestHooks | None = None, run_id: str | None = None
    ) -> None:
        from privstream.connectors.run_ids import new_run_id

        self.config = config
        self.hooks = hooks or TestHooks()
        #: stamped into every release and dead letter of this job object's submissions (default: new)
        self.run_id = run_id or new_run_id()
        self._heartbeat: Any = None  # the launcher's heartbeat after the ledger read
        if self.hooks.noise_seed is not None:
            logger.warning("TEST HOOK: release noise is deterministic (noise seed %s)", self.hooks.noise_seed)
        if self.hooks.expose_sketches_topic:
            logger.warning(
                "TEST HOOK: publishing NON-PRIVATE pre-noise sketches to %r (tests/audit only)",
                self.hooks.expose_sketches_topic,
            )

    @cached_property
    def checkpoint_dir(self) -> str:
        """``config.checkpoint_dir``, or a new temporary directory."""
        return self.config.checkpoint_dir or tempfile.mkdtemp(prefix="privstream-ckpt-")

    def kafka_inputs(self) -> KafkaInputs:
        """Check the broker (raises ``ConnectionError`` if unreachable, :class:`ConfigError` naming the
        option), create the output topics, find the stopping offsets and read the ledger topic to its
        end (raises :class:`~privstream.connectors.ledger_topic.LedgerUnavailable`, saying what to
        check, if its state cannot be established: the job then must not start)."""
        from privstream.connectors.clients import ensure_reachable, kafka_consumer
        from privstream.connectors.ledger_topic import read_ledger
        from privstream.connectors.scans import end_marker_offsets
        from privstream.connectors.topics import TopicSpec, create_topics
        from privstream.operators.release_logic import new_ledger

        config = self.config
        ensure_reachable(config.bootstrap)
        consumer = kafka_consumer(config.bootstrap)
        try:
            partitions = consumer.partitions_for_topic(config.topic)
        finally:
            consumer.close()
        if not partitions:
            raise ConfigError(f"--topic: topic {config.topic!r} does not exist on {config.bootstrap}")
        if sorted(partitions) != list(range(len(partitions))):
            raise ConfigError(f"--topic: unexpected partition ids {sorted(partitions)}")
        if config.stop_offsets is not None and set(config.stop_offsets) != set(partitions):
            raise ConfigError(
                f"--stop-offsets: must give every partition of {config.topic!r} ({sorted(partitions)}), "
                f"got {sorted(config.stop_offsets)}"
            )
        specs = [
            TopicSpec(config.releases_topic),
            TopicSpec(config.ledger_topic, compacted=True),
            TopicSpec(config.dlq),
        ]
        if self.hooks.expose_sketches_topic:
            specs.append(TopicSpec(self.hooks.expose_sketches_topic))
        create_topics(config.bootstrap, specs)
        stop_offsets = config.stop_offsets
        if config.stop_at_end_markers:
            try:
                stop_offsets = end_marker_offsets(config.bootstrap, config.topic)
            except TimeoutError as exc:
                raise ConfigError(f"--stop-at-end-markers: {exc}") from exc
        ledger = read_ledger(
            config.bootstrap,
            config.ledger_topic,
            new_ledger(config.release, config.spec, config.policy),
            job_name=config.job_name,
            timeout_s=config.ledger_timeout.total_seconds(),
            lease_s=config.ledger_lease.total_seconds(),
        )
        self._launch_heartbeat(ledger.nonce)
        return KafkaInputs(len(partitions), stop_offsets, ledger.state)

    def _launch_heartbeat(self, writer: str) -> None:
        """Heartbeat as the new writer from the end of the ledger read for one lease, until the
        release operator's own heartbeats take over (:mod:`~privstream.connectors.ledger_lease`)."""
        from privstream.connectors.ledger_lease import Heartbeat
        from privstream.jobs.pipeline import ledger_lease

        lease = ledger_lease(self.config, writer)
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self._heartbeat = Heartbeat(lease, duration_s=lease.lease_s).start()

    def environment(self, jars: list[str] | None = None) -> Any:
        """A ``StreamExecutionEnvironment`` with the job's Flink settings and ``jars`` (default: the
        verified connector jars; raises ``ConnectorJarsError`` naming the fix if they are missing)."""
        from privstream.connectors.flink_jars import connector_jar_urls

        return create_environment(
            self.config, connector_jar_urls() if jars is None else jars, self.checkpoint_dir
        )

    def build(self, env: Any, inputs: KafkaInputs | None = None) -> None:
        """Add the job's pipeline to ``env`` (one from :meth:`environment`, or any environment with
        the connector jars), reading ``inputs`` from Kafka unless given."""
        inputs = self.kafka_inputs() if inputs is None else inputs
        build_pipeline(
            env,
            self.config,
            shards=inputs.shards,
            stop_offsets=inputs.stop_offsets,
            initial_ledger=inputs.initial_ledger,
            hooks=self.hooks,
            run_id=self.run_id,
        )

    def prepare(self) -> Any:
        """Every check before Flink starts (jars, then Kafka), then the environment with the job
        added; call ``execute``/``execute_async`` on it (:meth:`run`, :meth:`start`)."""
        from privstream.connectors.flink_jars import connector_jar_urls

        jars = connector_jar_urls()
        inputs = self.kafka_inputs()
        env = self.environment(jars)
        self.build(env, inputs)
        return env

    def run(self) -> Any:
        """Run to completion (a bounded run ends by itself; an unbounded one runs until killed);
        returns Flink's ``JobExecutionResult``."""
        try:
            return self.prepare().execute(self.config.job_name)
        finally:
            if self._heartbeat is not None:
                self._heartbeat.stop()

    def start(self) -> Any:
        """Submit without waiting; returns the PyFlink ``JobClient``."""
        return self.prepare().execute_async(self.config.job_name)
