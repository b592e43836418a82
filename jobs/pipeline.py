"""The heavy-hitters Flink job's graph and environment settings, from a validated
:class:`~privstream.jobs.config.HeavyHittersConfig` (the job itself: :mod:`privstream.jobs.job`).

Environment settings (``docs/stack-facts.md``): ``python.executable`` is this interpreter (workers
otherwise miss pyflink), an explicit fixed-delay restart strategy (with checkpointing the default
retries forever), process execution mode (thread mode has state bugs here), bundles of a few
hundred messages (each message is a micro-batch), checkpointing every ``checkpoint_interval``
into ``checkpoint_dir`` (also the savepoint directory).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from privstream.connectors.ledger_lease import LedgerLease
from privstream.jobs.config import HeavyHittersConfig, TestHooks
from privstream.jobs.settings import FlinkSettings

from privstream.noise.rng import new_noise_key


def flink_configuration(config: FlinkSettings, jars: list[str], checkpoint_dir: str) -> Any:
    """The Flink configuration of the job; ``checkpoint_dir`` is ``config.checkpoint_dir`` or the
    directory the job chose for it."""
    from pyflink.common import Configuration

    conf = Configuration()
    ckpt = checkpoint_dir if "://" in checkpoint_dir else f"file://{checkpoint_dir}"
    settings = {
        "python.executable": sys.executable,
        "pipeline.jars": ";".join(jars),
        "pipeline.name": config.job_name,
        "python.fn-execution.bundle.size": str(config.bundle_size),
        "python.fn-execution.bundle.time": "200",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": str(config.restart_attempts),
        "restart-strategy.fixed-delay.delay": "1 s",
        "execution.checkpointing.interval": f"{config.checkpoint_interval_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": ckpt,
        "execution.checkpointing.savepoint-dir": ckpt,
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "state.checkpoints.num-retained": "2",
    }
    if config.restore_from:
        settings["execution.state-recovery.path"] = config.restore_from
    settings.update(config.flink_conf)
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf


def _txn_prefix(config: HeavyHittersConfig, what: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"privstream-{config.release.ledger_id}-{what}")


def ledger_lease(config: HeavyHittersConfig, writer: str) -> LedgerLease:
    """The job's ledger lease for ``writer`` (the start-up's nonce): the launcher's and the release
    operator's heartbeats (:mod:`~privstream.connectors.ledger_lease`)."""
    return LedgerLease(
        bootstrap=config.bootstrap,
        topic=config.ledger_topic,
        ledger_id=config.release.ledger_id,
        writer=writer,
        job_name=config.job_name,
        lease_s=config.ledger_lease.total_seconds(),
    )


def build_pipeline(
    env: Any,
    config: HeavyHittersConfig,
    *,
    shards: int,
    stop_offsets: dict[int, int] | None,
    initial_ledger: bytes,
    hooks: TestHooks,
    run_id: str | None = None,
) -> None:
    """Add source → sketch → combine → release → sinks to ``env``: ``shards`` partitions read up to
    ``stop_offsets`` (None: unbounded), the ledger starting from ``initial_ledger`` (reconciled with
    restored state: see ``ReleaseFunction``), ``hooks`` for tests only, ``run_id`` stamped into every
    release and dead letter (:func:`~privstream.operators.kafka_io.stamped`; None: not stamped).
    ``initial_ledger`` must come
    from :func:`~privstream.connectors.ledger_topic.read_ledger`: a job never starts a ledger it has
    not read (it would forget spent budget)."""
    if not isinstance(initial_ledger, bytes) or not initial_ledger:
        raise ValueError("initial_ledger: read the ledger topic to its end first (read_ledger); got none")
    from privstream.operators.combine_operator import EpochCombineFunction
    from privstream.operators.kafka_io import events_source, kafka_sink, stamped
    from privstream.operators.release_operator import LEDGER, SKETCHES, ReleaseFunction, encode_releases
    from privstream.operators.shard_keys import process_by_shard
    from privstream.operators.shard_operator import DEAD_LETTERS
    from privstream.operators.sketch_operator import ShardSketchFunction
    from pyflink.common import Types
    from pyflink.table import StreamTableEnvironment

    from privstream.accounting import PrivacyLedger

    t_env = StreamTableEnvironment.create(env)
    rows = events_source(
        t_env,
        bootstrap=config.bootstrap,
        topic=config.topic,
        group_id=config.group_id,
        stop_offsets=stop_offsets,
        shards=shards,
    )
    shard_sketches = (
        process_by_shard(
            rows,
            shards,
            None,  # keyed by partition in the source (events_source)
            ShardSketchFunction(config.spec, config.policy, config.topic, hooks, shards),
            None,
        )
        .uid("shard-sketch-2")
        .name("shard sketch (keyed by partition)")
        .set_parallelism(config.parallelism)
    )
    dead_letters = shard_sketches.get_side_output(DEAD_LETTERS)
    merged = (
        shard_sketches.key_by(lambda _: 0, key_type=Types.INT())
        .process(EpochCombineFunction(shards, config.spec))
        # uid and name kept from before the rename to EpochCombineFunction: savepoints map this
        # operator's state by its uid ("epoch-merge"), so changing it would orphan restored state
        .uid("epoch-merge")
        .name("fixed-order merge")
        .set_parallelism(1)
    )
    releases = (
        merged.key_by(lambda _: 0, key_type=Types.INT())
        .process(
            ReleaseFunction(
                config.release,
                config.spec,
                config.policy,
                initial_ledger,
                hooks=hooks,  # TESTS ONLY: seeded noise, the pre-noise sketches side output
                lease=ledger_lease(config, PrivacyLedger.from_bytes(initial_ledger).writer),
                submission_key=hooks.submission_key or new_noise_key(),
            ),
            output_type=Types.PICKLED_BYTE_ARRAY(),  # typed Release / ReleaseRefusal until the edge
        )
        .uid("release")
        .name("release + ledger")
        .set_parallelism(1)
    )

    def sink(stream: Any, topic: str, what: str, keyed: bool = False) -> None:
        stream.sink_to(
            kafka_sink(
                bootstrap=config.bootstrap,
                topic=topic,
                keyed=keyed,
                transactional_id_prefix=_txn_prefix(config, what),
            )
        ).uid(f"sink-{what}").name(f"kafka sink {topic}").set_parallelism(1)

    sink(
        stamped(encode_releases(releases, config.policy), run_id, "releases"),
        config.releases_topic,
        "releases",
    )
    sink(releases.get_side_output(LEDGER), config.ledger_topic, "ledger", keyed=True)
    sink(stamped(dead_letters, run_id, "dlq"), config.dlq, "dlq")
    if hooks.expose_sketches_topic:  # TESTS/AUDIT ONLY: the pre-noise sketches are NOT private
        sink(releases.get_side_output(SKETCHES), hooks.expose_sketches_topic, "sketches")


def create_environment(config: FlinkSettings, jars: list[str], checkpoint_dir: str) -> Any:
    """A ``StreamExecutionEnvironment`` with the job's settings (:func:`flink_configuration`)."""
    from pyflink.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(
        flink_configuration(config, jars, checkpoint_dir)
    )
    env.set_parallelism(1)
    return env


def job_environment(config: FlinkSettings, temp_prefix: str) -> Any:
    """:func:`create_environment` with the connector jars, checkpointing into ``config.checkpoint_dir``
    or a new temporary directory named ``temp_prefix…`` (the sliding-window, continual and LDP jobs)."""
    import tempfile

    from privstream.connectors.flink_jars import connector_jar_urls

    checkpoint_dir = config.checkpoint_dir or tempfile.mkdtemp(prefix=temp_prefix)
    return create_environment(config, connector_jar_urls(), checkpoint_dir)
