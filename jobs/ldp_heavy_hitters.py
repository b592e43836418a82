"""ldp-heavy-hitters: the HG-LDP server (Li et al., arXiv 2311.16062) as a Flink job.

::

    ldp-reports (LdpReport, from LdpProducer / privstream produce --ldp)
        ──► HG-LDP server operator (one key; keyed, checkpointed state = the whole server)
        ──► releases topic (LdpRelease: top-k with debiased estimates and the LDP guarantee,
            one per --epoch-reports applied reports)
        ──► state topic (HgLdpState, compacted, keyed by --deployment) ──► back to the clients
        ──► <reports>-dlq (unknown / too-old state versions, inconsistent or foreign reports)

The launcher computes the server after the public warm-up (``--warm-up FILE``: item indices, one per
line, or ``--warm-up-normal N``: N items of the Normal generator on the domain) and publishes state
version 0 before the job starts (not with ``--restore-from``: the restored server is past it; a
restore with other server settings than the checkpoint's fails naming the options). All sinks are
transactional (exactly once across a restore; readers use ``read_committed``). The job is
unbounded: stop it when done.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

from privstream.connectors.clients import add_bootstrap_option
from privstream.connectors.validation import parse_duration_ms
from privstream.jobs.run_report import add_progress_option
from privstream.operators.ldp_logic import LdpServerSettings
from privstream.operators.test_hooks import TestHooks

from privstream.ldp.hg_params import alpha_argument


@dataclass(frozen=True)
class LdpJobConfig:
    """The job: server settings, topics, Flink settings (named as the heavy-hitters job's)."""

    settings: LdpServerSettings
    bootstrap: str
    reports_topic: str = "ldp-reports"
    state_topic: str = "ldp-state"
    releases_topic: str = "ldp-releases"
    dlq_topic: str = "ldp-reports-dlq"
    checkpoint_interval_ms: int = 2000
    checkpoint_dir: str | None = None
    restart_attempts: int = 3
    bundle_size: int = 200
    restore_from: str | None = None
    job_name: str = "privstream-ldp-heavy-hitters"
    flink_conf: tuple[tuple[str, str], ...] = ()
    #: TESTS ONLY (programmatic, no option): an injected failure
    hooks: TestHooks = field(default_factory=TestHooks)
    run_id: str | None = None  #: stamped into every release and dead letter (None: not stamped)


def publish_initial_state(config: LdpJobConfig) -> bool:
    """Create the topics and publish state version 0 (the public warm-up's result); True if sent.

    A job restored from a checkpoint or savepoint (``restore_from``) publishes nothing here: its
    server is past version 0; the job itself re-announces the restored server's latest state on
    its first message (and after every ``--state-every`` refused reports), and a client's report
    against an aborted attempt's state that the replay did not make is dead-lettered by its version
    or digest (docs/ldp.md "Exactly once"). Sending version 0 again would make a compacted topic's
    latest record, for new clients, a version the server may no longer hold. A fresh start is a
    new server run (``settings.run_id``): its version 0 supersedes the old run's states for the
    clients."""
    from privstream.connectors.clients import kafka_producer
    from privstream.connectors.topics import TopicSpec, create_topics

    create_topics(
        config.bootstrap,
        [
            TopicSpec(config.reports_topic),
            TopicSpec(config.state_topic, compacted=True),
            TopicSpec(config.releases_topic),
            TopicSpec(config.dlq_topic),
        ],
    )
    if config.restore_from is not None:
        return False
    key, value = config.settings.state_message(config.settings.initial_server())
    producer = kafka_producer(config.bootstrap)
    try:
        producer.send(config.state_topic, key=key, value=value)
        producer.flush()
    finally:
        producer.close()
    return True


def build(env: Any, config: LdpJobConfig) -> None:
    """Add the job's pipeline to ``env``."""
    from privstream.operators.kafka_io import BYTES, events_source, kafka_sink, stamped
    from privstream.operators.ldp_operator import DEAD_LETTERS, STATE, LdpServerFunction
    from pyflink.common import Types
    from pyflink.table import StreamTableEnvironment

    t_env = StreamTableEnvironment.create(env)
    prefix = re.sub(r"[^A-Za-z0-9._-]", "-", f"privstream-ldp-{config.settings.deployment}")
    source = {"bootstrap": config.bootstrap, "topic": config.reports_topic, "group_id": f"{prefix}-server"}
    releases = (
        events_source(t_env, table="reports", **source)
        .key_by(lambda _: 0, key_type=Types.INT())
        .process(LdpServerFunction(config.settings, config.reports_topic, config.hooks), output_type=BYTES)
        .uid("hg-ldp-server")
        .name("HG-LDP server (HeavyGuardian + debiasing, one key)")
        .set_parallelism(1)
    )

    outputs = (
        (releases, config.releases_topic, "releases", False),
        (releases.get_side_output(STATE), config.state_topic, "state", True),
        (releases.get_side_output(DEAD_LETTERS), config.dlq_topic, "dlq", False),
    )
    for stream, topic, what, keyed in outputs:  # all transactional: exactly once across a restore
        if not keyed:  # releases and dead letters carry the run id
            stream = stamped(stream, config.run_id, what)
        target = kafka_sink(
            bootstrap=config.bootstrap, topic=topic, transactional_id_prefix=f"{prefix}-{what}", keyed=keyed
        )
        stream.sink_to(target).uid(f"sink-{what}").name(f"kafka sink {topic}").set_parallelism(1)


def environment(config: LdpJobConfig) -> Any:
    from privstream.connectors.flink_jars import connector_jar_urls
    from privstream.jobs.pipeline import create_environment

    checkpoint_dir = config.checkpoint_dir or tempfile.mkdtemp(prefix="privstream-ldp-ckpt-")
    return create_environment(config, connector_jar_urls(), checkpoint_dir)  # type: ignore[arg-type]


def start(config: LdpJobConfig) -> Any:
    """Publish state version 0 (not on a restore), then submit without waiting; returns the
    PyFlink ``JobClient``."""
    publish_initial_state(config)
    env = environment(config)
    build(env, config)
    return env.execute_async(config.job_name)


#: Flink options as the other jobs name them: (option, type, default)
FLINK_OPTIONS: tuple[tuple[str, type, object], ...] = (
    ("--checkpoint-interval", str, "2s"),
    ("--checkpoint-dir", str, None),
    ("--restart-attempts", int, 3),
    ("--restore-from", str, None),
)


def configure(p: argparse.ArgumentParser) -> None:
    add_bootstrap_option(p)
    p.add_argument("--scheme", choices=("bgr", "dsr", "bdr", "cnr"), default="cnr")
    p.add_argument("--epsilon", type=float, required=True, help="ε per report (event-level LDP)")
    p.add_argument("--domain", type=int, required=True, help="d: items are the indices 0..d-1")
    p.add_argument("--k", type=int, default=20, help="top-k = heavy cells λ_h")
    p.add_argument("--alpha", type=alpha_argument, default="1/3", help="BDR/CNR: ε₁/ε")
    p.add_argument("--light-cells", type=int, default=None, help="CNR: λ_l (default 5)")
    p.add_argument("--deployment", required=True, help="id shared with the clients (state topic key)")
    warm = p.add_mutually_exclusive_group(required=True)
    warm.add_argument("--warm-up", help="file of public warm-up item indices, one per line")
    warm.add_argument("--warm-up-normal", type=int, help="N warm-up items of the Normal generator (seed 0)")
    p.add_argument("--epoch-reports", type=int, default=1000, help="release every N applied reports")
    p.add_argument("--state-every", type=int, default=100, help="publish the state every N reports")
    p.add_argument("--max-lag", type=int, default=1024, help="state versions a report may lag")
    p.add_argument("--reports-topic", default="ldp-reports", help="LDP reports in (default: %(default)s)")
    p.add_argument(
        "--state-topic", default="ldp-state", help="the public server state (default: %(default)s)"
    )
    p.add_argument(
        "--releases-topic", default="ldp-releases", help="where releases go (default: %(default)s)"
    )
    p.add_argument("--dlq-topic", default=None, help="default: <reports-topic>-dlq")
    for option, kind, default in FLINK_OPTIONS:
        p.add_argument(option, type=kind, default=default)
    add_progress_option(p)


def _warm_up(args: argparse.Namespace) -> tuple[int, ...]:
    if args.warm_up_normal is not None:
        from privstream.datagen import normal_items

        return tuple(int(v) - 1 for v in normal_items(args.warm_up_normal, domain=args.domain, seed=0))
    with open(args.warm_up, encoding="utf-8") as handle:
        try:
            return tuple(int(line) for line in handle if line.strip())
        except ValueError:
            raise ValueError(f"--warm-up: {args.warm_up} must hold one integer item index per line") from None


def config_from_args(args: argparse.Namespace) -> LdpJobConfig:
    settings = LdpServerSettings(
        scheme=args.scheme,
        epsilon=args.epsilon,
        domain_size=args.domain,
        k=args.k,
        deployment=args.deployment,
        warm_up=_warm_up(args),
        alpha=args.alpha,
        light_cells=args.light_cells,
        epoch_reports=args.epoch_reports,
        state_every=args.state_every,
        max_lag=args.max_lag,
    )
    topics = {name: getattr(args, name) for name in ("reports_topic", "state_topic", "releases_topic")}
    flink = {
        option[2:].replace("-", "_"): getattr(args, option[2:].replace("-", "_"))
        for option, _, _ in FLINK_OPTIONS
    }
    interval = parse_duration_ms(flink.pop("checkpoint_interval"), "--checkpoint-interval")
    dlq = args.dlq_topic or f"{args.reports_topic}-dlq"
    return LdpJobConfig(
        settings, args.bootstrap, **topics, dlq_topic=dlq, checkpoint_interval_ms=interval, **flink
    )


def run(args: argparse.Namespace) -> int:
    """Validate (failing fast, naming the option), publish state 0 (unless restoring), then run
    until stopped."""
    from privstream.jobs import run_report
    from privstream.jobs.preflight import warn_before_start

    from privstream.console import console_logging

    console_logging()
    try:
        config = config_from_args(args)
        warn_before_start(config)  # noise-dominated parameters: a warning, from public parameters only
        ui_conf, web_ui = run_report.web_ui_settings(config.flink_conf)
        # the run id is the HG-LDP server run's (already in its state records), hex
        config = replace(config, run_id=config.settings.run_id.hex(), flink_conf=config.flink_conf + ui_conf)
        interval_s = run_report.progress_interval_s(args)
        publish_initial_state(config)
        env = environment(config)
    except (ValueError, TypeError, OSError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    build(env, config)
    plan = run_report.RunPlan.of(
        "ldp-heavy-hitters", config, web_ui, input_topic=config.reports_topic,
        per_release=f"ε={config.settings.epsilon:g} per report (local DP, randomised by the clients); no ledger",
        other_outputs=(f"public state → {config.state_topic}",), source_table="reports",
    )  # fmt: skip
    return run_report.execute_reported(env, plan, interval_s=interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m privstream.jobs.ldp_heavy_hitters", description=__doc__.splitlines()[0]
    )
    configure(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
