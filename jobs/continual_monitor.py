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
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

from privstream.connectors.clients import add_bootstrap_option
from privstream.connectors.validation import parse_duration_ms
from privstream.jobs.run_report import add_progress_option
from privstream.operators.continual_logic import MODES, ContinualSettings
from privstream.operators.test_hooks import TestHooks

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContinualConfig:
    """The job: its protocol settings, Kafka topics and Flink settings (the fields Flink's
    configuration reads have the heavy-hitters job's names)."""

    settings: ContinualSettings
    bootstrap: str
    topic: str
    releases_topic: str
    updates_topic: str
    dlq_topic: str
    checkpoint_interval_ms: int = 2000
    checkpoint_dir: str | None = None
    restart_attempts: int = 3
    bundle_size: int = 200
    restore_from: str | None = None
    job_name: str = "privstream-continual-monitor"
    flink_conf: tuple[tuple[str, str], ...] = ()
    #: TESTS ONLY (programmatic, no option): seeded noise keys, an injected failure
    hooks: TestHooks = field(default_factory=TestHooks)
    run_id: str | None = None  #: stamped into every release and dead letter (None: not stamped)


def nodes_of(bootstrap: str, topic: str) -> int:
    """The events topic's partition count (= k); ValueError naming ``--topic`` if it is missing."""
    from privstream.connectors.clients import ensure_reachable, kafka_consumer

    ensure_reachable(bootstrap)
    consumer = kafka_consumer(bootstrap)
    try:
        partitions = consumer.partitions_for_topic(topic)
    finally:
        consumer.close()
    if not partitions:
        raise ValueError(f"--topic: topic {topic!r} does not exist on {bootstrap}")
    return len(partitions)


def build(env: Any, config: ContinualConfig) -> None:
    """Add the job's pipeline to ``env`` (creates the output topics)."""
    from privstream.connectors.topics import TopicSpec, create_topics
    from privstream.operators.continual_operator import ContinualAggregatorFunction, ContinualNodeFunction
    from privstream.operators.kafka_io import BYTES, events_source, kafka_sink, stamped
    from privstream.operators.sketch_operator import DEAD_LETTERS
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
        t_env, bootstrap=config.bootstrap, topic=config.topic, group_id=f"{prefix}-nodes", table="events"
    )
    updates = (
        events.key_by(lambda r: r[1], key_type=Types.INT())
        .process(ContinualNodeFunction(config.settings, config.topic, config.hooks), output_type=BYTES)
        .uid("continual-node")
        .name("node: PCC + protocol (keyed by partition)")
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
    from privstream.connectors.flink_jars import connector_jar_urls
    from privstream.jobs.pipeline import create_environment

    checkpoint_dir = config.checkpoint_dir or tempfile.mkdtemp(prefix="privstream-continual-ckpt-")
    return create_environment(config, connector_jar_urls(), checkpoint_dir)  # type: ignore[arg-type]


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
    add_bootstrap_option(p)
    p.add_argument(
        "--topic", default="events", help="events topic: one partition per node (default: %(default)s)"
    )
    p.add_argument("--mode", choices=MODES, default="lu", help="PDCH-LU (lazy updates) or PDCH-BF")
    p.add_argument("--epsilon", type=float, required=True, help="each node's event-level ε (whole run)")
    p.add_argument("--lam", type=float, required=True, help="λ: the approximation (rounded down to 1/2^j)")
    p.add_argument("--theta", type=float, required=True, help="θ: release items with ≥ θ of the window")
    p.add_argument("--window", type=int, required=True, help="W: the window, in time steps")
    p.add_argument("--step", default="1d", help="a time step's event-time length (e.g. 1d, 60s)")
    p.add_argument("--universe", type=int, required=True, help="n: the declared universe is items 0..n-1")
    p.add_argument(
        "--window-items",
        type=int,
        default=None,
        help="public bound on events per node per window, used in the thresholds (default: W)",
    )
    p.add_argument("--delta", type=float, default=1e-6, help="--mode bf: Bloom failure probability")
    p.add_argument("--keys", default=None, help="--mode bf: directory from `privstream keys`")
    p.add_argument(
        "--session",
        default="",
        help="the run's id, stamped into its updates (other runs' updates are dead-lettered) and, with "
        "--mode bf, its period labels (default: a fresh random one, logged; give it again only to "
        "resume that run from a savepoint: --restore-from needs it)",
    )
    p.add_argument(
        "--releases-topic", default="continual-releases", help="where releases go (default: %(default)s)"
    )
    p.add_argument("--updates-topic", default=None, help="default: <topic>-updates")
    p.add_argument("--dlq-topic", default=None, help="default: <topic>-dlq")
    p.add_argument("--checkpoint-interval", default="2s")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--restart-attempts", type=int, default=3)
    p.add_argument("--restore-from", default=None, help="a savepoint or retained checkpoint")
    add_progress_option(p)


def config_from_args(args: argparse.Namespace, nodes: int) -> ContinualConfig:
    settings = ContinualSettings(
        mode=args.mode,
        epsilon=args.epsilon,
        lam=args.lam,
        window=args.window,
        universe=args.universe,
        nodes=nodes,
        theta=args.theta,
        step_ms=parse_duration_ms(args.step, "--step"),
        window_items=args.window_items,
        delta=args.delta,
        keys_dir=args.keys,
        session=args.session,
    )
    return ContinualConfig(
        settings=settings,
        bootstrap=args.bootstrap,
        topic=args.topic,
        releases_topic=args.releases_topic,
        updates_topic=args.updates_topic or f"{args.topic}-updates",
        dlq_topic=args.dlq_topic or f"{args.topic}-dlq",
        checkpoint_interval_ms=parse_duration_ms(args.checkpoint_interval, "--checkpoint-interval"),
        checkpoint_dir=args.checkpoint_dir,
        restart_attempts=args.restart_attempts,
        restore_from=args.restore_from,
    )


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
        config = with_secrets(config_from_args(args, nodes_of(args.bootstrap, args.topic)))
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
