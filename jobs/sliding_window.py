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

from privstream.connectors.clients import add_bootstrap_option
from privstream.connectors.validation import parse_duration_ms
from privstream.jobs.ldp_heavy_hitters import FLINK_OPTIONS, environment
from privstream.jobs.run_report import add_progress_option
from privstream.operators.test_hooks import TestHooks
from privstream.operators.window_logic import WINDOWINGS, LedgerCharge, WindowSettings

from privstream.validation import check_privacy_bound

if TYPE_CHECKING:
    from privstream.jobs.run_report import RunPlan

logger = logging.getLogger(__name__)

MECHANISM = "dpsw-sketch"


@dataclass(frozen=True)
class SlidingWindowConfig:
    """The job: sketch settings, topics, ledger, Flink settings (named as the heavy-hitters job's)."""

    settings: WindowSettings
    bootstrap: str
    topic: str = "events"
    releases_topic: str = "window-releases"
    dlq_topic: str = "events-dlq"
    ledger_topic: str = "ledger"
    ledger_id: str = "sliding-window/events"
    total_epsilon: float | None = None  #: the ledger's total ε (default: this run's ε)
    total_delta: float | None = None
    ledger_timeout_s: float = 60.0
    checkpoint_interval_ms: int = 2000
    checkpoint_dir: str | None = None
    restart_attempts: int = 3
    bundle_size: int = 200
    restore_from: str | None = None
    job_name: str = "privstream-sliding-window"
    flink_conf: tuple[tuple[str, str], ...] = ()
    #: TESTS ONLY (programmatic, no option): an injected failure, the sketch states topic (NOT private)
    hooks: TestHooks = field(default_factory=TestHooks)
    run_id: str | None = None  #: stamped into every release and dead letter (None: not stamped)

    def __post_init__(self) -> None:
        if not self.ledger_id:
            raise ValueError("--ledger-id: must be a non-empty id")
        if not self.ledger_timeout_s > 0:
            raise ValueError(f"--ledger-timeout: must be > 0, got {self.ledger_timeout_s!r}")
        check_privacy_bound("--total-epsilon", self.total_epsilon, "epsilon")
        check_privacy_bound("--total-delta", self.total_delta, "delta")


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
        timeout_s=config.ledger_timeout_s,
    )
    logger.info("ledger %r charged (%s, %s) once for this run: entry #%d", entry.ledger_id, s.epsilon,
                s.delta, entry.sequence)  # fmt: skip
    return LedgerCharge(entry.ledger_id, entry.sequence, entry.entry_hash)


def prepare(config: SlidingWindowConfig) -> SlidingWindowConfig:
    """Check the events topic's partitions against ``shards``, create the output topics, choose the
    checkpoint directory and charge the ledger; returns the config whose releases name that charge
    (the Flink environment is then the other jobs': ``ldp_heavy_hitters.environment``). It does not
    read ``restore_from``: an incompatible savepoint is refused later, by the operators, after this
    charge (module docstring, "Restore order")."""
    from privstream.connectors.topics import TopicSpec, create_topics
    from privstream.jobs.continual_monitor import nodes_of

    partitions = nodes_of(config.bootstrap, config.topic)
    if partitions != config.settings.shards:
        raise ValueError(
            f"--topic: {config.topic!r} has {partitions} partitions, not {config.settings.shards}"
        )
    specs = [TopicSpec(config.releases_topic), TopicSpec(config.dlq_topic)]
    specs.append(TopicSpec(config.ledger_topic, compacted=True))
    if config.hooks.expose_states_topic:
        specs.append(TopicSpec(config.hooks.expose_states_topic))
    create_topics(config.bootstrap, specs)
    checkpoint_dir = config.checkpoint_dir or tempfile.mkdtemp(prefix="privstream-window-ckpt-")
    charge = charge_ledger(config)
    return replace(config, settings=replace(config.settings, charge=charge), checkpoint_dir=checkpoint_dir)


def build(env: Any, config: SlidingWindowConfig) -> None:
    """Add the job's pipeline to ``env`` (``config`` from :func:`prepare`)."""
    from privstream.operators.kafka_io import BYTES, events_source, kafka_sink, stamped
    from privstream.operators.window_operator import WindowShardFunction
    from pyflink.common import Types
    from pyflink.table import StreamTableEnvironment

    if not config.settings.charge.ledger_id:
        raise ValueError("settings.charge: charge the ledger first (prepare); no release goes uncovered")
    t_env = StreamTableEnvironment.create(env)
    prefix = re.sub(r"[^A-Za-z0-9._-]", "-", f"privstream-window-{config.ledger_id}")
    rows = events_source(t_env, bootstrap=config.bootstrap, topic=config.topic, group_id=f"{prefix}-shards")
    function = WindowShardFunction(config.settings, config.topic, config.hooks)
    releases = (
        rows.key_by(lambda r: r[1], key_type=Types.INT())
        .process(function, output_type=BYTES)
        .uid("dpsw-shard")
        .name("DPSW-Sketch per shard (keyed by partition)")
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


def start(config: SlidingWindowConfig) -> tuple[Any, SlidingWindowConfig]:
    """Charge the ledger, then submit without waiting: (the PyFlink ``JobClient``, the prepared config)."""
    config = prepare(config)
    env = environment(config)
    build(env, config)
    return env.execute_async(config.job_name), config


def _ints(option: str, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{option}: a comma-separated list of integers, got {text!r}") from None


def _length(option: str, text: str, windowing: str) -> int:
    """``--window``/``--substream``: items (count) or event-time ms (event-time: also ``10s``, ``5m``)."""
    if windowing == "event-time" and not text.strip().lstrip("-").isdigit():
        return parse_duration_ms(text, option)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{option}: an integer number of items (count windows), got {text!r}") from None


def configure(p: argparse.ArgumentParser) -> None:
    add_bootstrap_option(p)
    p.add_argument(
        "--topic", default="events", help="events topic: one partition per shard (default: %(default)s)"
    )
    p.add_argument(
        "--shard-key", choices=("item", "user"), default="item", help="what the partitioner hashed"
    )
    p.add_argument(
        "--windowing",
        choices=WINDOWINGS,
        default="count",
        help="count: the last w items of a shard (the paper); event-time: the last w ms, released on "
        "EpochWatermark punctuations (produce with --punctuate-every W)",
    )
    p.add_argument("--window", required=True, help="w: items of a shard (count) or event time (10s, or ms)")
    p.add_argument(
        "--substream", required=True, help="W: substream length, items or event time (as --window)"
    )
    p.add_argument(
        "--origin", type=int, default=None, help="event-time: public start of the grid (ms, default 0)"
    )
    p.add_argument(
        "--window-items",
        type=int,
        default=None,
        help="event-time: PUBLIC bound on a shard's items per window (heavy-hitter threshold; required)",
    )
    p.add_argument("--checkpoints", default=None, help="I: comma list from W down to 1 (else --alpha)")
    p.add_argument("--alpha", type=float, default=None, help="smooth-histogram factor (default 0.5)")
    p.add_argument(
        "--budget-ratio",
        type=float,
        default=None,
        help="q of the budget split (default α, 0.5 with --checkpoints)",
    )
    p.add_argument("--epsilon", type=float, required=True, help="ε of each shard's sketch (whole run)")
    p.add_argument("--delta", type=float, required=True, help="δ of each shard's sketch (whole run)")
    p.add_argument("--depth", type=int, default=3, help="a: PCMS rows")
    p.add_argument("--width", type=int, default=2000, help="b: PCMS counters per row")
    p.add_argument("--hash-seed", type=int, default=0, help="the public hash seed")
    p.add_argument("--domain-size", type=int, required=True, help="declared domain: items 0..d-1")
    p.add_argument("--queries", default=None, help="public query items, comma list (default: the domain)")
    p.add_argument(
        "--gamma",
        type=float,
        required=True,
        help="γ: heavy hitters have ≥ γ·w of the window (must exceed ζ = e/width)",
    )
    p.add_argument(
        "--releases-topic", default="window-releases", help="where releases go (default: %(default)s)"
    )
    p.add_argument("--dlq-topic", default=None, help="default: <topic>-dlq")
    p.add_argument(
        "--ledger-topic", default="ledger", help="the privacy ledger's topic (default: %(default)s)"
    )
    p.add_argument("--ledger-id", default=None, help="default: sliding-window/<topic>")
    p.add_argument("--total-epsilon", type=float, default=None, help="ledger total ε (default: --epsilon)")
    p.add_argument("--total-delta", type=float, default=None, help="ledger total δ (default: --delta)")
    p.add_argument("--ledger-timeout", default="60s")
    for option, kind, default in FLINK_OPTIONS:
        p.add_argument(option, type=kind, default=default)
    add_progress_option(p)


def config_from_args(args: argparse.Namespace, shards: int) -> SlidingWindowConfig:
    windowing = args.windowing
    settings = WindowSettings(
        window=_length("--window", args.window, windowing),
        substream=_length("--substream", args.substream, windowing),
        depth=args.depth,
        width=args.width,
        epsilon=args.epsilon,
        delta=args.delta,
        domain_size=args.domain_size,
        gamma=args.gamma,
        shards=shards,
        checkpoints=_ints("--checkpoints", args.checkpoints),
        alpha=args.alpha,
        budget_ratio=args.budget_ratio,
        hash_seed=args.hash_seed,
        queries=_ints("--queries", args.queries),
        shard_key=args.shard_key,
        windowing=windowing,
        origin=args.origin,
        window_items=args.window_items,
    )
    return SlidingWindowConfig(
        settings,
        args.bootstrap,
        topic=args.topic,
        releases_topic=args.releases_topic,
        dlq_topic=args.dlq_topic or f"{args.topic}-dlq",
        ledger_topic=args.ledger_topic,
        ledger_id=args.ledger_id or f"sliding-window/{args.topic}",
        total_epsilon=args.total_epsilon,
        total_delta=args.total_delta,
        ledger_timeout_s=parse_duration_ms(args.ledger_timeout, "--ledger-timeout") / 1000,
        checkpoint_interval_ms=parse_duration_ms(args.checkpoint_interval, "--checkpoint-interval"),
        checkpoint_dir=args.checkpoint_dir,
        restart_attempts=args.restart_attempts,
        restore_from=args.restore_from,
    )


def run(args: argparse.Namespace) -> int:
    """``privstream run sliding-window``: validate (failing fast, naming the option), charge the
    ledger (fail closed), then run until stopped. A ``--restore-from`` savepoint is checked only by
    the operators, after the charge: an incompatible one fails the job with the budget spent (module
    docstring, "Restore order")."""
    from privstream.connectors.ledger_topic import LedgerUnavailable
    from privstream.connectors.run_ids import new_run_id
    from privstream.jobs import run_report
    from privstream.jobs.continual_monitor import nodes_of
    from privstream.jobs.preflight import warn_before_start

    from privstream.accounting import BudgetExceeded
    from privstream.console import console_logging

    console_logging()
    try:
        config = config_from_args(args, nodes_of(args.bootstrap, args.topic))
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
