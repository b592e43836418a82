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
from dataclasses import dataclass, field, replace
from typing import Any

from privstream.connectors.topics import dead_letter_topic
from privstream.jobs.run_report import add_progress_option
from privstream.jobs.settings import FlinkSettings, KafkaSettings
from privstream.operators.ldp_logic import LdpServerSettings
from privstream.operators.test_hooks import TestHooks

from privstream.options import add_options, from_args, nested, option


@dataclass(frozen=True)
class LdpJobConfig(KafkaSettings, FlinkSettings):
    """The job: server settings, topics, and the shared Kafka and Flink settings
    (:mod:`privstream.jobs.settings`); the command line is generated from these fields."""

    settings: LdpServerSettings = field(metadata=nested())
    reports_topic: str = field(default="ldp-reports", metadata=option("LDP reports in"))
    state_topic: str = field(default="ldp-state", metadata=option("the public server state"))
    releases_topic: str = field(default="ldp-releases", metadata=option("where releases go"))
    dlq_topic: str = field(
        default="", metadata=option("dead-letter topic", default_text="<reports-topic>-dlq")
    )
    job_name: str = field(default="privstream-ldp-heavy-hitters", kw_only=True)
    #: TESTS ONLY (programmatic, no option): an injected failure
    hooks: TestHooks = field(default_factory=TestHooks)
    run_id: str | None = None  #: stamped into every release and dead letter (None: not stamped)

    def __post_init__(self) -> None:
        if not self.dlq_topic:
            object.__setattr__(self, "dlq_topic", dead_letter_topic(self.reports_topic))
        self.check_kafka(
            ("--reports-topic", self.reports_topic),
            ("--state-topic", self.state_topic),
            ("--releases-topic", self.releases_topic),
            ("--dlq-topic", self.dlq_topic),
        )
        self.check_flink()


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
    from privstream.jobs.pipeline import job_environment

    return job_environment(config, "privstream-ldp-ckpt-")


def start(config: LdpJobConfig) -> Any:
    """Publish state version 0 (not on a restore), then submit without waiting; returns the
    PyFlink ``JobClient``."""
    publish_initial_state(config)
    env = environment(config)
    build(env, config)
    return env.execute_async(config.job_name)


def configure(p: argparse.ArgumentParser) -> None:
    add_options(p, LdpJobConfig)
    add_progress_option(p)


def config_from_args(args: argparse.Namespace) -> LdpJobConfig:
    config: LdpJobConfig = from_args(LdpJobConfig, args)
    return config


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
    from privstream.jobs.cli import script_main

    return script_main("privstream.jobs.ldp_heavy_hitters", __doc__ or "", configure, run, argv)


if __name__ == "__main__":
    sys.exit(main())
