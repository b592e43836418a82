"""sliding-window: frequencies and γ-heavy hitters over each shard's last w items (DPSW-Sketch).

::

    events (Kafka; one partition per shard, filled by the data-independent partitioner)
        ──► shard operator (keyed by partition; keyed, checkpointed state = the shard's DPSW-Sketch
            binary state, Wang–Wang–Chen KDD 2024 Alg. 2)
        ──► releases topic (WindowRelease: at every substream end of a shard — count windows — or
            at every EpochWatermark punctuation that completes a substream — event-time windows —,
            Alg. 3 estimates of the public query set and the γ-heavy hitters of the declared domain,
            with the windowing, the window, the guarantee and the ledger charge that covers it)
        ──► <topic>-dlq (undecodable or misrouted messages, a misrouted one closes its shard; event
            time: late or beyond-horizon events)

Privacy: each shard's sketch is ρ-zCDP at all times (Lemma 4.1), i.e. (ε, δ)-DP by Thm 3.2, for
the count-based relation "replace one event at a fixed position of its shard", or with
``--windowing event-time`` for "add/remove one event" (ρ_all/2; changing one event ≤ ρ;
:func:`privstream.window.params.shard_relation`; docs/sliding-window.md); all releases of a run are post-processing of noise drawn once per substream, and shards are
disjoint (parallel composition), so the launcher charges the privacy ledger **once per submission**
(read to its end first, fail closed: :func:`~privstream.connectors.ledger_topic.read_ledger`) and
every release names that entry. A restore from a checkpoint does not charge again (it is the same
submission and replays identical noise). A new submission resuming a savepoint charges again and
re-keys the restored sketches (:meth:`privstream.window.DPSWSketch.rekey`: fresh noise for every
substream still under construction and every later one), so two submissions never share noise on
data that differs; a savepoint of other settings or of older noise is refused (start afresh).

Restore order (fail closed, but the charge is spent): the launcher charges the ledger **before**
submitting, and the savepoint's sketch state is checked only inside the job, by each shard's
operator when it restores (at its first message): a savepoint of state layout 1 or another noise
version, of other sketch parameters (ε, δ, w, W, ...) or another binding (shard count, shard key,
domain), or of an injected-noise (test) run, is refused there, and the job fails once its
``--restart-attempts`` are used up. Nothing is released, but the ledger entry written for that
submission stays (an append-only ledger has no refund): the budget is spent for nothing. The
launcher does not check the savepoint itself (the state is inside Flink's savepoint format);
resume only savepoints of this job run with the same options and code, or start afresh.

All sinks are transactional (exactly once across a restore; readers use ``read_committed``). The
job is unbounded: stop it when done.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from privstream.connectors.topics import dead_letter_topic
from privstream.jobs.run_report import add_progress_option
from privstream.jobs.settings import (
    FlinkSettings,
    KafkaSettings,
    LedgerSettings,
    ShardSettings,
    partitions_of,
)
from privstream.operators.test_hooks import TestHooks
from privstream.operators.window_logic import LedgerCharge, WindowSettings

from privstream.options import add_options, from_args, nested, option

if TYPE_CHECKING:
    from privstream.jobs.run_report import RunPlan

logger = logging.getLogger(__name__)

MECHANISM = "dpsw-sketch"
CHECKPOINT_PREFIX = "privstream-window-ckpt-"  #: temporary checkpoint directories' name


@dataclass(frozen=True)
class SlidingWindowConfig(KafkaSettings, FlinkSettings, ShardSettings, LedgerSettings):
    """The job: sketch settings, topics, and the shared Kafka, Flink and ledger settings
    (:mod:`privstream.jobs.settings`); the command line is generated from these fields.
    ``ledger_id`` defaults to ``sliding-window/<topic>``, ``dlq_topic`` to ``<topic>-dlq``."""

    settings: WindowSettings = field(metadata=nested())
    topic: str = field(default="events", metadata=option("events topic: one partition per shard"))
    releases_topic: str = field(default="window-releases", metadata=option("where releases go"))
    dlq_topic: str = field(default="", metadata=option("dead-letter topic", default_text="<topic>-dlq"))
    job_name: str = field(default="privstream-sliding-window", kw_only=True)
    #: TESTS ONLY (programmatic, no option): an injected failure, the sketch states topic (NOT private)
    hooks: TestHooks = field(default_factory=TestHooks)
    run_id: str | None = None  #: stamped into every release and dead letter (None: not stamped)

    def __post_init__(self) -> None:
        if self.ledger_id is None:
            object.__setattr__(self, "ledger_id", f"sliding-window/{self.topic}")
        if not self.dlq_topic:
            object.__setattr__(self, "dlq_topic", dead_letter_topic(self.topic))
        self.check_kafka(
            ("--topic", self.topic),
            ("--releases-topic", self.releases_topic),
            ("--dlq-topic", self.dlq_topic),
        )
        self.check_flink()
        self.check_parallelism()
        self.check_ledger()


def charge_ledger(config: SlidingWindowConfig) -> LedgerCharge:
    """Read the ledger to its end (fail closed), charge this submission's (ε, δ) once and write the
    entry before the job starts. Raises ``LedgerUnavailable`` or ``BudgetExceeded`` (no job then)."""
    from privstream.connectors.ledger_topic import charge_on_topic

    from privstream.accounting import Budget, PrivacyLedger

    s = config.settings
    total = Budget(config.total_epsilon or s.epsilon, config.total_delta or s.delta)
    entry = charge_on_topic(
        config.bootstrap,
        config.ledger_topic,
        PrivacyLedger(total, composition="sequential", ledger_id=config.ledger_id),
        Budget(s.epsilon, s.delta),
        mechanism=MECHANISM,
        label=lambda nonce: (
            f"sliding-window ({s.windowing}) on {config.topic}: every release of submission {nonce}"
        ),
        job_name=config.job_name,
        timeout_s=config.ledger_timeout.total_seconds(),
    )
    logger.info("ledger %r charged (%s, %s) once for this run: entry #%d", entry.ledger_id, s.epsilon,
                s.delta, entry.sequence)  # fmt: skip
    return LedgerCharge(entry.ledger_id, entry.sequence, entry.entry_hash)


def prepare(config: SlidingWindowConfig) -> SlidingWindowConfig:
    """Check the events topic's partitions against ``shards``, create the output topics, choose the
    checkpoint directory and charge the ledger; returns the config whose releases name that charge
    (the Flink environment is then :func:`environment`). It does not
    read ``restore_from``: an incompatible savepoint is refused later, by the operators, after this
    charge (module docstring, "Restore order")."""
    from privstream.connectors.topics import TopicSpec, create_topics

    partitions = partitions_of(config.bootstrap, config.topic)
    if partitions != config.settings.shards:
        raise ValueError(
            f"--topic: {config.topic!r} has {partitions} partitions, not {config.settings.shards}"
        )
    specs = [TopicSpec(config.releases_topic), TopicSpec(config.dlq_topic)]
    specs.append(TopicSpec(config.ledger_topic, compacted=True))
    if config.hooks.expose_states_topic:
        specs.append(TopicSpec(config.hooks.expose_states_topic))
    create_topics(config.bootstrap, specs)
    checkpoint_dir = config.checkpoint_dir or tempfile.mkdtemp(prefix=CHECKPOINT_PREFIX)
    charge = charge_ledger(config)
    return replace(config, settings=replace(config.settings, charge=charge), checkpoint_dir=checkpoint_dir)


def build(env: Any, config: SlidingWindowConfig) -> None:
    """Add the job's pipeline to ``env`` (``config`` from :func:`prepare`)."""
    from privstream.operators.kafka_io import BYTES, events_source, kafka_sink, stamped
    from privstream.operators.shard_keys import process_by_shard
    from privstream.operators.window_operator import WindowShardFunction
    from pyflink.table import StreamTableEnvironment

    if not config.settings.charge.ledger_id:
        raise ValueError("settings.charge: charge the ledger first (prepare); no release goes uncovered")
    t_env = StreamTableEnvironment.create(env)
    prefix = re.sub(r"[^A-Za-z0-9._-]", "-", f"privstream-window-{config.ledger_id}")
    shards = config.settings.shards
    rows = events_source(
        t_env, bootstrap=config.bootstrap, topic=config.topic, group_id=f"{prefix}-shards", shards=shards
    )
    function = WindowShardFunction(config.settings, config.topic, config.hooks)
    releases = (
        process_by_shard(rows, shards, None, function, BYTES)  # keyed by partition in the source
        .uid("dpsw-shard-2")
        .name("DPSW-Sketch per shard (keyed by partition)")
        .set_parallelism(config.parallelism)
    )
    for stream, topic, what, keyed in _outputs(releases, config):  # all transactional: exactly once
        if what in ("releases", "dlq"):
            stream = stamped(stream, config.run_id, what)
        target = kafka_sink(
            bootstrap=config.bootstrap, topic=topic, transactional_id_prefix=f"{prefix}-{what}", keyed=keyed
        )
        stream.sink_to(target).uid(f"sink-{what}").name(f"kafka sink {topic}").set_parallelism(1)


def _outputs(releases: Any, config: SlidingWindowConfig) -> list[tuple[Any, str, str, bool]]:
    """(stream, topic, sink name, keyed) of every sink."""
    from privstream.operators.window_operator import DEAD_LETTERS, STATES

    outputs = [
        (releases, config.releases_topic, "releases", False),
        (releases.get_side_output(DEAD_LETTERS), config.dlq_topic, "dlq", False),
    ]
    states_topic = config.hooks.expose_states_topic
    if states_topic:  # TESTS ONLY: raw counters and noise keys
        outputs.append((releases.get_side_output(STATES), states_topic, "states", False))
    return outputs


def environment(config: SlidingWindowConfig) -> Any:
    from privstream.jobs.pipeline import job_environment

    return job_environment(config, CHECKPOINT_PREFIX)


def start(config: SlidingWindowConfig) -> tuple[Any, SlidingWindowConfig]:
    """Charge the ledger, then submit without waiting: (the PyFlink ``JobClient``, the prepared config)."""
    config = prepare(config)
    env = environment(config)
    build(env, config)
    return env.execute_async(config.job_name), config


def configure(p: argparse.ArgumentParser) -> None:
    add_options(p, SlidingWindowConfig)
    add_progress_option(p)


def config_from_args(args: argparse.Namespace, shards: int) -> SlidingWindowConfig:
    """The job's config from parsed options; ``shards``: the events topic's partition count."""
    config: SlidingWindowConfig = from_args(SlidingWindowConfig, args, shards=shards)
    return config


def run(args: argparse.Namespace) -> int:
    """``privstream run sliding-window``: validate (failing fast, naming the option), charge the
    ledger (fail closed), then run until stopped. A ``--restore-from`` savepoint is checked only by
    the operators, after the charge: an incompatible one fails the job with the budget spent (module
    docstring, "Restore order")."""
    from privstream.connectors.ledger_topic import LedgerUnavailable
    from privstream.connectors.run_ids import new_run_id
    from privstream.jobs import run_report
    from privstream.jobs.preflight import warn_before_start

    from privstream.accounting import BudgetExceeded
    from privstream.console import console_logging

    console_logging()
    try:
        config = config_from_args(args, partitions_of(args.bootstrap, args.topic))
        warn_before_start(config)  # noise-dominated parameters: a warning, before the ledger charge
        ui_conf, web_ui = run_report.web_ui_settings(config.flink_conf)
        config = replace(config, run_id=new_run_id(), flink_conf=config.flink_conf + ui_conf)
        interval_s = run_report.progress_interval_s(args)
        config = prepare(config)
        env = environment(config)
    except (ValueError, TypeError, OSError, ConnectionError, LedgerUnavailable, BudgetExceeded) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    build(env, config)
    return run_report.execute_reported(env, run_plan(config, web_ui), interval_s=interval_s)


def run_plan(config: SlidingWindowConfig, web_ui: str | None) -> RunPlan:
    """What the start banner, progress and summary say about the submission of ``config``."""
    from privstream.jobs.run_report import RunPlan

    s = config.settings
    total_epsilon = config.total_epsilon or s.epsilon
    total_delta = config.total_delta or s.delta
    return RunPlan.of(
        "sliding-window",
        config,
        web_ui,
        ledger_topic=config.ledger_topic,
        ledger_id=config.ledger_id,
        per_release=f"(ε={s.epsilon:g}, δ={s.delta:g}) charged once for the whole run",
        total=f"(ε={total_epsilon:g}, δ={total_delta:g})",
    )


def main(argv: list[str] | None = None) -> int:
    from privstream.jobs.cli import script_main

    return script_main("privstream.jobs.sliding_window", __doc__ or "", configure, run, argv)


if __name__ == "__main__":
    sys.exit(main())
