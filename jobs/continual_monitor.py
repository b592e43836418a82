"""continual-monitor: continual heavy hitters from distributed streams (Chan, Li, Shi, Xu), PDCH-LU or PDCH-BF.

::

    events (Kafka, one partition per node) ──► node operator (keyed by partition)
        time steps closed by EpochWatermark punctuations; PCC + lazy updates (lu) or masked Bloom
        tables (bf) in keyed state  ──► "<topic>-updates" (ContinualUpdate, one per node and step)
    "<topic>-updates" ──► aggregator operator ──► releases (Release: the θ-heavy hitters of every
        step's window, with the guarantee), "<topic>-dlq" for malformed or late events and for
        updates of other runs (an earlier run's leftovers on "<topic>-updates": each update carries
        its run's session, and the aggregator dead-letters the others with the reason)

Node → aggregator communication travels on its own Kafka topic (so it is real and measured: the
records carry their word counts). Both sinks are transactional and both sources read
``read_committed``, so a restore from a checkpoint publishes every update and every release
exactly once (the node's noise is keyed by its checkpointed secret, so replayed blocks get the same
noise). The job runs unbounded (the aggregator's source has no end); stop it when done.

``--mode bf`` needs the nodes' X25519 keys from the offline setup (``privstream keys --nodes k --out DIR``,
Chan et al. §2.5's trusted authority); this job runs all k nodes in one Flink job, so the
aggregator obliviousness it demonstrates holds only when nodes run apart from the aggregator
(docs/continual.md).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from privstream.connectors.topics import dead_letter_topic
from privstream.jobs.run_report import add_progress_option
from privstream.jobs.settings import FlinkSettings, KafkaSettings, ShardSettings, partitions_of
from privstream.operators.continual_logic import ContinualSettings
from privstream.operators.test_hooks import TestHooks

from privstream.options import add_options, from_args, nested, option

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContinualConfig(KafkaSettings, FlinkSettings, ShardSettings):
    """The job: its protocol settings, Kafka topics, and the shared Kafka and Flink settings
    (:mod:`privstream.jobs.settings`); the command line is generated from these fields."""

    settings: ContinualSettings = field(metadata=nested())
    topic: str = field(default="events", metadata=option("events topic: one partition per node"))
    releases_topic: str = field(default="continual-releases", metadata=option("where releases go"))
    updates_topic: str = field(
        default="", metadata=option("the nodes' updates to the aggregator", default_text="<topic>-updates")
    )
    dlq_topic: str = field(default="", metadata=option("dead-letter topic", default_text="<topic>-dlq"))
    job_name: str = field(default="privstream-continual-monitor", kw_only=True)
    #: TESTS ONLY (programmatic, no option): seeded noise keys, an injected failure
    hooks: TestHooks = field(default_factory=TestHooks)
    run_id: str | None = None  #: stamped into every release and dead letter (None: not stamped)

    def __post_init__(self) -> None:
        if not self.updates_topic:
            object.__setattr__(self, "updates_topic", f"{self.topic}-updates")
        if not self.dlq_topic:
            object.__setattr__(self, "dlq_topic", dead_letter_topic(self.topic))
        self.check_kafka(
            ("--topic", self.topic),
            ("--releases-topic", self.releases_topic),
            ("--updates-topic", self.updates_topic),
            ("--dlq-topic", self.dlq_topic),
        )
        self.check_flink()
        self.check_parallelism()


def build(env: Any, config: ContinualConfig) -> None:
    """Add the job's pipeline to ``env`` (creates the output topics)."""
    from privstream.connectors.topics import TopicSpec, create_topics
    from privstream.operators.continual_operator import ContinualAggregatorFunction, ContinualNodeFunction
    from privstream.operators.kafka_io import BYTES, events_source, kafka_sink, stamped
    from privstream.operators.shard_keys import process_by_shard
    from privstream.operators.shard_operator import DEAD_LETTERS
    from pyflink.common import Types
    from pyflink.table import StreamTableEnvironment

    if config.hooks.noise_seed is not None:
        logger.warning("TEST HOOK: node noise is deterministic (noise seed %s)", config.hooks.noise_seed)
    create_topics(
        config.bootstrap,
        [TopicSpec(config.updates_topic), TopicSpec(config.releases_topic), TopicSpec(config.dlq_topic)],
    )
    t_env = StreamTableEnvironment.create(env)
    prefix = re.sub(r"[^A-Za-z0-9._-]", "-", f"privstream-continual-{config.topic}")
    events = events_source(
        t_env,
        bootstrap=config.bootstrap,
        topic=config.topic,
        group_id=f"{prefix}-nodes",
        table="events",
        shards=config.settings.nodes,
    )
    updates = (
        process_by_shard(
            events,
            config.settings.nodes,
            None,  # keyed by partition in the source (events_source)
            ContinualNodeFunction(config.settings, config.topic, config.hooks),
            BYTES,
        )
        .uid("continual-node-2")
        .name("node: PCC + protocol (keyed by partition)")
        .set_parallelism(config.parallelism)
    )

    def sink(stream: Any, topic: str, what: str) -> None:
        if topic != config.updates_topic:  # releases and dead letters carry the run id
            stream = stamped(stream, config.run_id, what)
        stream.sink_to(
            kafka_sink(bootstrap=config.bootstrap, topic=topic, transactional_id_prefix=f"{prefix}-{what}")
        ).uid(f"sink-{what}").name(f"kafka sink {topic}").set_parallelism(1)

    sink(updates, config.updates_topic, "updates")
    sink(updates.get_side_output(DEAD_LETTERS), config.dlq_topic, "dlq")
    received = events_source(
        t_env,
        bootstrap=config.bootstrap,
        topic=config.updates_topic,
        group_id=f"{prefix}-aggregator",
        table="updates",
    )
    releases = (
        received.key_by(lambda _: 0, key_type=Types.INT())
        .process(ContinualAggregatorFunction(config.settings, config.updates_topic), output_type=BYTES)
        .uid("continual-aggregator")
        .name("aggregator")
        .set_parallelism(1)
    )
    sink(releases, config.releases_topic, "releases")
    sink(releases.get_side_output(DEAD_LETTERS), config.dlq_topic, "aggregator-dlq")  # other runs' updates


def environment(config: ContinualConfig) -> Any:
    from privstream.jobs.pipeline import job_environment

    return job_environment(config, "privstream-continual-ckpt-")


def with_secrets(config: ContinualConfig) -> ContinualConfig:
    """``config`` with this submission's secrets drawn (:meth:`ContinualSettings.with_secrets`)."""
    settings = config.settings.with_secrets()
    if not config.settings.session:
        logger.warning(
            "run session %s: pass --session %s to resume this run from a savepoint", settings.session,
            settings.session,
        )  # fmt: skip
    return replace(config, settings=settings)


def start(config: ContinualConfig) -> Any:
    """Submit without waiting; returns the PyFlink ``JobClient``."""
    config = with_secrets(config)
    env = environment(config)
    build(env, config)
    return env.execute_async(config.job_name)


def configure(p: argparse.ArgumentParser) -> None:
    add_options(p, ContinualConfig)
    add_progress_option(p)


def config_from_args(args: argparse.Namespace, nodes: int) -> ContinualConfig:
    """The job's config from parsed options; ``nodes``: the events topic's partition count."""
    config: ContinualConfig = from_args(ContinualConfig, args, nodes=nodes)
    return config


def run(args: argparse.Namespace) -> int:
    """Validate (failing fast, naming the option), then run until stopped."""
    from privstream.jobs import run_report
    from privstream.jobs.preflight import warn_before_start

    from privstream.console import console_logging

    console_logging()
    if args.restore_from and not args.session:
        print(
            "error: --session: resuming a run from a savepoint needs that run's --session (logged when it "
            "started); its updates still on the updates topic would otherwise be dead-lettered as another run's",
            file=sys.stderr,
        )
        return 2
    try:
        config = with_secrets(config_from_args(args, partitions_of(args.bootstrap, args.topic)))
        warn_before_start(config)  # noise-dominated parameters: a warning, from public parameters only
        ui_conf, web_ui = run_report.web_ui_settings(config.flink_conf)
        # the run id is the run's session (already in its updates): one id selects all of the run
        config = replace(config, run_id=config.settings.session, flink_conf=config.flink_conf + ui_conf)
        interval_s = run_report.progress_interval_s(args)
        env = environment(config)
    except (ValueError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    build(env, config)
    s = config.settings
    plan = run_report.RunPlan.of(
        "continual-monitor", config, web_ui,
        per_release=f"ε={s.epsilon:g} per node for the whole run (event level, --mode {s.mode}); no ledger",
        other_outputs=(f"node updates → {config.updates_topic}",), source_table="events",
    )  # fmt: skip
    return run_report.execute_reported(env, plan, interval_s=interval_s)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keys"]:  # the old spelling of `privstream keys`
        from privstream.jobs import keys_cli

        keys = argparse.ArgumentParser(prog="privstream keys", description=keys_cli.__doc__.splitlines()[0])
        keys_cli.configure(keys)
        return keys_cli.run(keys.parse_args(argv[1:]))
    parser = argparse.ArgumentParser(
        prog="python -m privstream.jobs.continual_monitor", description=__doc__.splitlines()[0]
    )
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
