"""One benchmark for every job (issue 25): events (reports)/s from submission to the last release.

One run, one embedded broker, one generated stream: ``--events`` Zipf(1.1) events on 100,000 values
(event times at 100,000 events/s), hashed by item onto ``--partitions`` partitions, in ``EventBatch``
messages of ``--batch`` events. Rows, each timed from the job's submission (its environment's
creation, JVM start included) to its last release:

- **reference**: Flink SQL's own non-private exact ``SELECT item, COUNT(*) … GROUP BY item`` over
  the same events, one JSON record per event (the engine's native Kafka source and JSON format,
  bounded at the topic's end, into a ``blackhole`` sink);
- **heavy-hitters** at k = 256, 4,096 and 65,536 per partition (one epoch of the whole stream,
  per-shard PMG), at k = 256 with ``--parallelism 2`` (two Python workers in the local
  MiniCluster), and at k = 256 on the same events sent one event per message (``--single-events``,
  a prefix of the stream; the sliding-window job's short window too);
- **sliding-window** (DPSW-Sketch, count-based windows per shard): a short window a user would try
  first (``w`` = 100,000, W = 10,000) and the paper's scale (``w`` = 10^6, W = 10^5; DPSW App. A);
  the time to the last of its ⌊n_shard / W⌋ releases per shard;
- **continual-monitor** (PDCH-LU, one node per partition), with an ``EpochWatermark`` per 1 s of
  event time: the time to the last step's release;
- **ldp** (its own broker and a Normal stream, d = 1,000): the LDP producer (vectorised client
  randomisation, batched ``LdpReportBatch`` messages)
  and the ``ldp-heavy-hitters`` job over its reports (``benchmarks/bench_ldp_job.py``);
- **scale-out**: heavy-hitters (k = 256), sliding-window (paper scale) and continual-monitor with
  ``--parallelism`` 1 and 2, submitted with ``bin/flink run -py jobs/<job>.py`` to PyFlink's own
  standalone cluster with two TaskManagers of one slot each (heavy-hitters: the job's duration as
  the JobManager reports it, client start excluded; the unbounded two: from the job's start on the
  JobManager to its last release read). The LDP server is one sequential HeavyGuardian and has no
  ``--parallelism``. Which sub-task holds which shard follows the shards' routing keys
  (docs/deploy.md): at parallelism 2, 2 partitions split 1 + 1 and 4 partitions 2 + 2.

Unbounded jobs (sliding-window, continual-monitor, ldp) are cancelled once their last release was
read (``read_committed``: a release counts when its checkpoint committed it, so the time includes
up to one ``--checkpoint-interval``, 2 s by default).

Run on an otherwise idle machine (never two heavy jobs at once)::

    flock /tmp/privstream-heavy.lock .venv/bin/python benchmarks/bench_jobs.py

``--only ROW[,ROW]`` runs some rows (names as in the table: reference, hh, hh-single, window,
continual, ldp, scale-out); ``--json FILE`` also writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # bench_flink, bench_ldp_job, tests.flink_fixtures

from bench_flink import ensure_jar_urls, job_config, produce, run_privstream, zipf_columns  # noqa: E402

UNIVERSE = 100_000
ROWS = ("reference", "hh", "hh-single", "window", "continual", "ldp", "scale-out")


def busy_cores() -> Callable[[], float]:
    """A stopwatch of the machine's CPU: call the result to get the cores busy on average since
    (from /proc/stat: all cores, all processes — the broker, the JVMs and the Python workers)."""

    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    busy0, total0 = read()

    def since() -> float:
        busy, total = read()
        return (busy - busy0) / max(1, total - total0) * (os.cpu_count() or 1)

    return since


@dataclass
class Row:
    job: str
    setting: str
    events: int
    seconds: float
    note: str = ""
    cores: float | None = None  #: cores busy on average while the row ran (the whole machine)

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def json_topic(bootstrap: str, topic: str, events: int, seed: int) -> None:
    """The same events as :func:`bench_flink.produce`, one JSON record ``{"item", "ts"}`` per event."""
    from confluent_kafka import Producer
    from privstream.connectors.topics import TopicSpec, create_topics

    create_topics(bootstrap, [TopicSpec(topic, 1)])
    columns = zipf_columns(events, seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    for item, ts in zip(columns.items.tolist(), columns.event_time_ms.tolist(), strict=True):
        while True:
            try:
                producer.produce(topic, f'{{"item":{item},"ts":{ts}}}'.encode())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()


def run_sql_count(bootstrap: str, topic: str) -> float:
    """Seconds of Flink SQL's exact GROUP BY count over the JSON topic (bounded at its end)."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("pipeline.jars", ";".join(ensure_jar_urls()))
    t_env.get_config().set("parallelism.default", "1")
    t_env.execute_sql(
        f"""CREATE TABLE ev (item BIGINT, ts BIGINT) WITH (
            'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
            'properties.group.id' = 'bench-sql', 'scan.startup.mode' = 'earliest-offset',
            'scan.bounded.mode' = 'latest-offset', 'format' = 'json')"""
    )
    t_env.execute_sql("CREATE TABLE counts (item BIGINT, c BIGINT) WITH ('connector' = 'blackhole')")
    start = time.monotonic()
    t_env.execute_sql("INSERT INTO counts SELECT item, COUNT(*) FROM ev GROUP BY item").wait()
    return time.monotonic() - start


def wait_releases(bootstrap: str, topic: str, done: Callable[[list[dict]], bool], timeout_s: float) -> None:
    """Read ``topic`` (read_committed) until ``done(records)``; TimeoutError after ``timeout_s``."""
    from kafka import KafkaConsumer
    from privstream.connectors.avro_codec import decode

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        isolation_level="read_committed", fetch_max_wait_ms=100,
    )  # fmt: skip
    records: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        while not done(records):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(records)} records after {timeout_s:.0f} s")
            for batch in consumer.poll(timeout_ms=100).values():
                records += [decode(r.value)[1] for r in batch]
    finally:
        consumer.close()


def timed_unbounded(
    start: Callable[[], Any], bootstrap: str, topic: str, done: Callable[[list[dict]], bool]
) -> float:
    """Seconds from ``start()`` (which submits a job and returns its JobClient) to ``done``."""
    t0 = time.monotonic()
    client = start()
    try:
        wait_releases(bootstrap, topic, done, timeout_s=1800)
        return time.monotonic() - t0
    finally:
        client.cancel().result()


def run_window(
    bootstrap: str, topic: str, events: int, partitions: int, window: int, substream: int, tmp: str
) -> tuple[float, int]:
    """The sliding-window job over ``topic``; (seconds to the last release, releases)."""
    from privstream.jobs.sliding_window import SlidingWindowConfig, start
    from privstream.operators.window_logic import WindowSettings

    settings = WindowSettings(
        window=window, substream=substream, epsilon=1.0, delta=1e-10, domain_size=UNIVERSE, gamma=0.01,
        shards=partitions, alpha=0.5, queries=tuple(range(10)),
    )  # fmt: skip
    name = f"{topic}-w{window}"
    config = SlidingWindowConfig(
        settings, bootstrap=bootstrap, topic=topic, releases_topic=f"{name}-releases",
        dlq_topic=f"{name}-dlq", ledger_topic=f"{name}-ledger", ledger_id=f"bench/{name}",
        checkpoint_dir=f"{tmp}/{name}",
    )  # fmt: skip
    expected = sum(n // substream for n in _events_per_partition(events, partitions))
    seconds = timed_unbounded(lambda: start(config)[0], bootstrap, config.releases_topic,
                              lambda records: len({(r["shard"], r["substream"]) for r in records}) >= expected)  # fmt: skip
    return seconds, expected


def _events_per_partition(events: int, partitions: int) -> list[int]:
    """Events per partition of the benchmark stream (hashed by item, as the producer does)."""
    from privstream.partitioning import partition_for

    return np.bincount(
        partition_for(zipf_columns(events, seed=1).items, partitions), minlength=partitions
    ).tolist()


def produce_punctuated(
    bootstrap: str, topic: str, events: int, partitions: int, batch: int, step_ms: int
) -> int:
    """The benchmark stream with an ``EpochWatermark`` on every partition at each multiple of
    ``step_ms`` of event time; returns the number of steps closed."""
    from privstream.connectors.produce import EventProducer
    from privstream.connectors.topics import TopicSpec, create_topics

    create_topics(bootstrap, [TopicSpec(topic, partitions)])
    columns = zipf_columns(events, seed=1)
    t = columns.event_time_ms
    steps = int(t[-1] // step_ms)
    with EventProducer(
        bootstrap, topic, events_per_message=batch, key_by="item", max_request_size=16 << 20
    ) as producer:
        producer.punctuate(0)
        for s in range(steps):
            lo, hi = np.searchsorted(t, [s * step_ms, (s + 1) * step_ms])
            producer.send(columns.items[lo:hi], None, t[lo:hi])
            producer.punctuate((s + 1) * step_ms)
        producer.finish()
    return steps


def run_continual(bootstrap: str, topic: str, partitions: int, steps: int, step_ms: int, tmp: str) -> float:
    from privstream.jobs.continual_monitor import ContinualConfig, start
    from privstream.operators.continual_logic import ContinualSettings

    settings = ContinualSettings(
        mode="lu", epsilon=1.0, lam=0.0625, window=5, universe=UNIVERSE, nodes=partitions, theta=0.2,
        step_ms=step_ms,
    )  # fmt: skip
    config = ContinualConfig(
        settings=settings, bootstrap=bootstrap, topic=topic, releases_topic=f"{topic}-releases",
        updates_topic=f"{topic}-updates", dlq_topic=f"{topic}-dlq", checkpoint_dir=f"{tmp}/{topic}",
    )  # fmt: skip
    return timed_unbounded(lambda: start(config), bootstrap, config.releases_topic,
                           lambda records: len({r["epoch"] for r in records}) >= steps)  # fmt: skip


def _new_job(cluster: Any, state: str, timeout_s: float = 120.0) -> str:
    """The id of the cluster's one job this benchmark has not timed yet, once it is in ``state``."""
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = [j for j in cluster.rest("/jobs/overview")["jobs"] if j["jid"] not in _seen]
        if len(jobs) == 1 and jobs[0]["state"] == state:
            _seen.add(jobs[0]["jid"])
            return str(jobs[0]["jid"])
        if time.monotonic() > deadline:
            raise TimeoutError(f"no new job in state {state} after {timeout_s:.0f} s: {jobs}")
        time.sleep(0.2)


def run_cluster(
    bootstrap: str,
    topics: dict[str, str],
    stops: dict[int, int],
    events: int,
    expected: dict[str, Callable[[list[dict]], bool]],
    tmp: str,
    restart: Callable[[], None],
) -> Iterator[Row]:
    """Each job at parallelism 1 and 2, submitted with ``bin/flink run -py`` to a standalone cluster
    of two one-slot TaskManagers (``restart()`` before each submission): heavy-hitters (k = 256,
    bounded: the JobManager's job duration), then the unbounded sliding-window (paper scale) and
    continual-monitor jobs (``flink run -d``; from the job's start on the JobManager to its last
    release read, then cancelled). ``topics``: the events topic of each; ``expected``: when each
    unbounded job's releases are complete."""
    from tests.flink_fixtures import running_cluster

    hh = ("--epsilon", "1", "--delta", "1e-6", "--k", "256", "--epoch", str(events), "--stop-offsets",
          ",".join(f"{p}:{o}" for p, o in stops.items()))  # fmt: skip
    window = ("--window", "1000000", "--substream", "100000", "--alpha", "0.5", "--epsilon", "1", "--delta",
              "1e-10", "--domain-size", str(UNIVERSE), "--gamma", "0.01", "--queries", "0,1,2,3,4,5,6,7,8,9")  # fmt: skip
    continual = ("--epsilon", "1", "--lam", "0.0625", "--window", "5", "--universe", str(UNIVERSE),
                 "--theta", "0.2", "--step", "1s")  # fmt: skip
    jobs = (("heavy-hitters", hh), ("sliding-window", window), ("continual-monitor", continual))
    with running_cluster(Path(tmp) / "cluster", taskmanagers=2, slots=1) as cluster:
        for job, options in jobs:
            for parallelism in (1, 2):
                name = f"{job}-p{parallelism}"
                outputs = ["--releases-topic", f"{name}-releases", "--dlq-topic", f"{name}-dlq"]
                if job != "continual-monitor":
                    outputs += ["--ledger-topic", f"{name}-ledger", "--ledger-id", f"bench/{name}"]
                else:
                    outputs += ["--updates-topic", f"{name}-updates"]
                script = ROOT / "jobs" / f"{job.replace('-', '_')}.py"
                args = ["--bootstrap", bootstrap, "--topic", topics[job], *options, *outputs,
                        "--parallelism", str(parallelism), "--checkpoint-dir", str(cluster.workdir / "checkpoints")]  # fmt: skip
                restart()
                bounded = job == "heavy-hitters"
                proc = cluster.submit(script, *args, timeout_s=1800, detached=not bounded)
                if proc.returncode != 0:
                    raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
                setting = f"two TaskManagers, parallelism {parallelism}"
                if bounded:
                    jid = _new_job(cluster, "FINISHED")
                    seconds = cluster.rest(f"/jobs/{jid}")["duration"] / 1000
                    yield Row(job, f"k = 256, {setting}", events, seconds, "JobManager's job duration")
                    continue
                jid = _new_job(cluster, "RUNNING")
                wait_releases(bootstrap, f"{name}-releases", expected[job], timeout_s=1800)
                seconds = time.time() - cluster.rest(f"/jobs/{jid}")["start-time"] / 1000
                cluster.cancel(jid)
                yield Row(
                    job,
                    setting,
                    events,
                    seconds,
                    "from the job's start on the JobManager to its last release",
                )


_seen: set[str] = set()


def table(rows: list[Row], reference: Row | None) -> str:
    lines = [
        "| job | setting | events | s | events/s | vs SQL count | cores busy |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        events = not row.note.startswith("LDP")  # reports are not the reference's events
        ratio = f"{row.rate / reference.rate:.2f}×" if reference and row is not reference and events else ""
        lines.append(
            f"| {row.job} | {row.setting} | {row.events:,} | {row.seconds:.1f} | {row.rate:,.0f} | {ratio} "
            f"| {'—' if row.cores is None else f'{row.cores:.2f}'} |"
        )
    notes = sorted({r.note for r in rows if r.note})
    return "\n".join(lines + [""] + [f"- {note}" for note in notes] if notes else lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--single-events", type=int, default=200_000, help="prefix sent one event per message"
    )
    parser.add_argument("--ldp-reports", type=int, default=200_000)
    parser.add_argument("--only", default=",".join(ROWS), help=f"rows to run, of {', '.join(ROWS)}")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    opts = parser.parse_args()
    only = set(opts.only.split(","))
    if only - set(ROWS):
        parser.error(f"--only: unknown rows {sorted(only - set(ROWS))}")
    logging.basicConfig(level=logging.WARNING)
    from privstream.connectors.broker import EmbeddedBroker

    rows: list[Row] = []
    reference: Row | None = None
    n, parts = opts.events, opts.partitions

    cores = busy_cores()

    def restart() -> None:
        """The next row's CPU counts from here (after its input was produced)."""
        nonlocal cores
        cores = busy_cores()

    def add(row: Row, measured: bool = True) -> None:
        """``measured``: the row alone ran since the last restart() (else no cores are shown)."""
        row.cores = cores() if measured else None
        restart()
        rows.append(row)
        print(f"{row.job:>18} | {row.setting:<48} | {row.events:>10,} events | {row.seconds:7.1f} s | "
              f"{row.rate:>10,.0f} /s", flush=True)  # fmt: skip

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        bootstrap = broker.bootstrap
        t0 = time.monotonic()
        stops = produce(bootstrap, "bench-events", n, parts, opts.batch, seed=1)
        print(f"produced {n:,} events in {time.monotonic() - t0:.1f} s", flush=True)
        restart()
        if "reference" in only:
            json_topic(bootstrap, "bench-events-json", n, seed=1)
            restart()
            reference = Row("Flink SQL (reference)", "exact GROUP BY item COUNT(*), JSON records", n,
                            run_sql_count(bootstrap, "bench-events-json"))  # fmt: skip
            add(reference)
        if "hh" in only:
            for k in (256, 4096, 65536):
                seconds = run_privstream(job_config(
                    bootstrap, "bench-events", k=k, epoch=n, stop_offsets=stops, checkpoint_dir=f"{tmp}/hh{k}",
                    releases_topic=f"hh{k}-releases", ledger_topic=f"hh{k}-ledger", ledger_id=f"bench/hh{k}",
                ))  # fmt: skip
                add(Row("heavy-hitters", f"k = {k:,}, per-shard PMG", n, seconds))
            seconds = run_privstream(job_config(
                bootstrap, "bench-events", k=256, epoch=n, stop_offsets=stops, checkpoint_dir=f"{tmp}/hh-p2",
                releases_topic="hh-p2-releases", ledger_topic="hh-p2-ledger", ledger_id="bench/hh-p2",
                parallelism=2,
            ))  # fmt: skip
            add(Row("heavy-hitters", "k = 256, --parallelism 2 (the local MiniCluster)", n, seconds))
        if "hh-single" in only:
            m = opts.single_events
            single = produce(bootstrap, "bench-single", m, parts, 1, seed=1)
            restart()
            seconds = run_privstream(job_config(
                bootstrap, "bench-single", k=256, epoch=m, stop_offsets=single, checkpoint_dir=f"{tmp}/single",
                releases_topic="single-releases", ledger_topic="single-ledger", ledger_id="bench/single",
            ))  # fmt: skip
            add(Row("heavy-hitters", "k = 256, one event per message", m, seconds))
            seconds, releases = run_window(bootstrap, "bench-single", m, parts, 100_000, 10_000, tmp)
            add(
                Row(
                    "sliding-window", f"short window, one event per message ({releases} releases)", m, seconds
                )
            )
        if "window" in only:
            for label, w, sub in (("short window", 100_000, 10_000), ("paper scale", 1_000_000, 100_000)):
                seconds, releases = run_window(bootstrap, "bench-events", n, parts, w, sub, tmp)
                add(
                    Row(
                        "sliding-window", f"{label}: w = {w:,}, W = {sub:,} ({releases} releases)", n, seconds
                    )
                )
        if "continual" in only:
            steps = produce_punctuated(bootstrap, "bench-steps", n, parts, opts.batch, step_ms=1000)
            restart()
            seconds = run_continual(bootstrap, "bench-steps", parts, steps, 1000, tmp)
            add(Row("continual-monitor", f"PDCH-LU, {steps} steps of 1 s, universe {UNIVERSE:,}", n, seconds))
        if "ldp" in only:
            import bench_ldp_job

            for row in bench_ldp_job.bench_rows(opts.ldp_reports):  # its own broker and stream
                add(Row(*row), measured=False)  # three rows from one call
        if "scale-out" in only:
            steps = produce_punctuated(bootstrap, "cluster-steps", n, parts, opts.batch, step_ms=1000)
            per_shard = _events_per_partition(n, parts)
            expected = {
                "sliding-window": lambda rs: (
                    len({(r["shard"], r["substream"]) for r in rs}) >= sum(m // 100_000 for m in per_shard)
                ),
                "continual-monitor": lambda rs: len({r["epoch"] for r in rs}) >= steps,
            }
            topics = {
                "heavy-hitters": "bench-events",
                "sliding-window": "bench-events",
                "continual-monitor": "cluster-steps",
            }
            for row in run_cluster(bootstrap, topics, stops, n, expected, tmp, restart):
                add(row)
    print()
    print(table(rows, reference))
    if opts.json:
        Path(opts.json).write_text(json.dumps([{**r.__dict__, "rate": r.rate} for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
