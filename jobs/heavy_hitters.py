"""The central heavy-hitters job: MG (or PAMG) per shard → fixed-order merge → one noisy release per epoch.

::

    python -m privstream.jobs.heavy_hitters --bootstrap 127.0.0.1:9092 --topic events \\
        --epsilon 1 --delta 1e-6 --k 4096 --epoch 100000          # 100000 events per shard and epoch
    privstream run heavy-hitters ... --epoch 60s --lateness 5s   # tumbling event-time epochs, closed
                                                                 # by EpochWatermark punctuation
    privstream run heavy-hitters ... --m 8                       # user sets (UserSetEvent) with PAMG

Pipeline (PyFlink DataStream; see ``docs/stack-facts.md``)::

    KafkaSource(events, raw bytes + partition + offset)          offsets in checkpoints
      → key_by(partition) → ShardSketchFunction                  keyed state = epoch sketches
            └─ side output: dead letters → <topic>-dlq           (undecodable, late, rejected)
      → key_by(0) → EpochCombineFunction                         shard sketches in shard-id order
                                                                 (per shard) or their fixed-order merge
      → key_by(0) → ReleaseFunction                               ledger in state, release entry point
            ├─ main: typed Release (ReleaseRefusal once the budget is exhausted)
            │    → encode at the edge (Avro) → releases           KafkaSink EXACTLY_ONCE
            └─ side: LedgerEntry (one per charge, hash-chained) keyed by ledger id → ledger
                                                                  KafkaSink EXACTLY_ONCE (compacted)

Shards are the topic's partitions, which producers must choose by a hash of the item (or of the
user: ``--shard-key user``, always for PAMG); the job recomputes the hash of every event and
dead-letters misrouted messages, because position-based partitioning breaks the neighbour relation. Each Kafka message should be an ``EventBatch`` (micro-batch): per-record Python is
~10^4 records/s here, batched messages reach ~10^5–10^6 events/s (``benchmarks/bench_flink.py``).
Releases of merged sketches use GSHM / thresholded Laplace (never PMG). Configuration errors
are reported before Flink starts, naming the option. The source is unbounded unless
``--stop-offsets`` gives the end offset of every partition (never ``latest``: tansu answers it
wrongly); ``EndMarker`` messages close a partition's epochs in an unbounded run. Known connector bug
(FLINK-33466 / FLINK-31006, flink-connector-kafka 4.0.1): a *bounded* run resumed from a savepoint
reads to its stopping offsets and publishes everything but then does not finish; cancel it.

This module is the command line (also the file ``flink run -py`` submits): it parses the options
into a :class:`~privstream.jobs.config.HeavyHittersConfig` and runs a
:class:`~privstream.jobs.job.HeavyHittersJob`, the programmatic API, which it re-exports.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from privstream.jobs.config import ConfigError, HeavyHittersConfig, TestHooks
from privstream.jobs.job import HeavyHittersJob
from privstream.jobs.run_report import add_progress_option

from privstream.options import add_options, from_args

if TYPE_CHECKING:
    from privstream.jobs.run_report import RunPlan

__all__ = [
    "ConfigError",
    "HeavyHittersConfig",
    "HeavyHittersJob",
    "config_from_args",
    "configure",
    "main",
    "run",
]


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of the heavy-hitters job (also used by ``privstream run heavy-hitters``), generated
    from :class:`HeavyHittersConfig`'s fields."""
    add_options(parser, HeavyHittersConfig)
    add_progress_option(parser)


def config_from_args(args: argparse.Namespace) -> HeavyHittersConfig:
    """The job's config from parsed options; raises :class:`ConfigError` naming the option."""
    config: HeavyHittersConfig = from_args(HeavyHittersConfig, args)
    return config


def run(args: argparse.Namespace, *, hooks: TestHooks | None = None) -> int:
    """Validate, check the connector jars and Kafka, then run the job to completion. ``hooks``:
    TESTS ONLY, programmatic (a test's entry script passes them; no option does)."""
    from privstream.connectors.flink_jars import ConnectorJarsError
    from privstream.connectors.ledger_topic import LedgerUnavailable
    from privstream.jobs import run_report
    from privstream.jobs.preflight import warn_before_start

    from privstream.console import console_logging

    console_logging()
    try:
        config = config_from_args(args)
        warn_before_start(config)  # noise-dominated parameters: a warning, from public parameters only
        ui_conf, web_ui = run_report.web_ui_settings(config.flink_conf)
        job = HeavyHittersJob(replace(config, flink_conf=config.flink_conf + ui_conf), hooks=hooks)
        env = job.prepare()
        interval_s = run_report.progress_interval_s(args)
    except (ConfigError, ConnectorJarsError, LedgerUnavailable, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"error: --bootstrap: {exc}", file=sys.stderr)
        return 2
    return run_report.execute_reported(env, run_plan(job, web_ui), interval_s=interval_s)


def run_plan(job: HeavyHittersJob, web_ui: str | None) -> RunPlan:
    """What the start banner, progress and summary say about ``job``'s submission."""
    from privstream.jobs.run_report import RunPlan

    config, release = job.config, job.config.release
    epoch = f"{config.epoch} events per shard" if isinstance(config.epoch, int) else f"{config.epoch}"
    return RunPlan.of(
        "heavy-hitters",
        config,
        web_ui,
        run_id=job.run_id,
        dlq_topic=config.dlq,
        ledger_topic=config.ledger_topic,
        ledger_id=release.ledger_id,
        per_release=f"(ε={release.epsilon:g}, δ={release.delta:g}) per epoch ({epoch})",
        total=f"(ε={release.total_epsilon:g}, δ={release.total_delta:g})",
    )


def main(argv: list[str] | None = None, *, hooks: TestHooks | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m privstream.jobs.heavy_hitters", description=__doc__.splitlines()[0]
    )
    configure(parser)
    return run(parser.parse_args(argv), hooks=hooks)


if __name__ == "__main__":
    sys.exit(main())
