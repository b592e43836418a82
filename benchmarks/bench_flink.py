"""End-to-end Flink throughput (Kafka → release) and checkpoint size versus stream length.

Part 1, in one run over the same topic (``EventBatch`` messages of ``--batch`` Zipf events on
``--partitions`` partitions, embedded tansu broker):

- **privstream**: the heavy-hitters job (MG with ``--k`` counters per partition on micro-batches →
  per-shard PMG releases summed, or ``--release-mode merged`` → transactional KafkaSink), all
  ``--events`` events (``--skip-naive`` times only this job, e.g. at ``--k 65536``);
- **naive**: the textbook per-record PyFlink job over the same topic: decode each message into one
  record per event (``flat_map``), ``key_by(item)``, a Python keyed counter per item, the counts
  written to Kafka at the end. Per-record Python is slow, so it reads only the first
  ``--naive-events`` events (a prefix of the same topic, bounded by explicit offsets).

Rates are events / wall time from submission to the end of the job (JVM and Python worker start
included, which favours the naive job since it processes fewer events). Target: privstream ≥ 10×.

Part 2: the privstream job on streams of increasing length with one epoch per run; the size of its
completed checkpoints (sampled from the checkpoint directory while it runs) must not grow with the
stream (sketch state is O(k) per open epoch; the ledger grows by one entry per release, not per event).

Run (the machine is shared; never two heavy jobs at once)::

    flock /tmp/privstream-heavy.lock python benchmarks/bench_flink.py
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.flink_jars import ensure_connector_jars
from privstream.connectors.produce import EventProducer
from privstream.connectors.scans import end_marker_offsets
from privstream.connectors.topics import TopicSpec, create_topics
from privstream.jobs.job import HeavyHittersConfig, HeavyHittersJob

from privstream.datagen import EventColumns, generate_events


def zipf_columns(events: int, seed: int) -> EventColumns:
    """The benchmark stream: Zipf(1.1) items on 100,000 values, event times at 100,000 events/s."""
    return generate_events("zipf", events, seed=seed, universe=100_000, s=1.1, rate=100_000.0)


def produce(
    bootstrap: str, topic: str, events: int, partitions: int, batch: int, seed: int
) -> dict[int, int]:
    """Produce the stream; returns ``{partition: offset after its last EventBatch}`` message counts."""
    create_topics(bootstrap, [TopicSpec(topic, partitions)])
    columns = zipf_columns(events, seed)
    with EventProducer(
        bootstrap,
        topic,
        events_per_message=batch,
        key_by="item",
        max_request_size=16 << 20,
        batch_size=1 << 20,
    ) as producer:
        for start in range(0, events, 1_000_000):
            producer.send(
                columns.items[start : start + 1_000_000],
                None,
                columns.event_time_ms[start : start + 1_000_000],
            )
        producer.finish()
    return end_marker_offsets(bootstrap, topic)


def job_config(bootstrap: str, topic: str, *, k: int = 256, **options: Any) -> HeavyHittersConfig:
    """The heavy-hitters job on ``topic`` (ε = 1, δ = 1e-6); ``options`` are further config fields."""
    return HeavyHittersConfig(bootstrap=bootstrap, topic=topic, epsilon=1.0, delta=1e-6, k=k, **options)


def run_privstream(config: HeavyHittersConfig) -> float:
    """Seconds from the Flink environment's creation to the end of the job (the Kafka checks before
    it are not timed; the ledger read is)."""
    job = HeavyHittersJob(config)
    jars = ensure_jar_urls()
    inputs = job.kafka_inputs()
    start = time.monotonic()
    env = job.environment(jars)
    job.build(env, inputs)
    env.execute(config.job_name)
    return time.monotonic() - start


def run_naive(bootstrap: str, topic: str, stop_offsets: dict[int, int]) -> float:
    """Per-record keyed PyFlink counting over the same topic (prefix up to ``stop_offsets``)."""
    from privstream.connectors.avro_codec import decode
    from privstream.operators.kafka_io import BYTES, events_source, kafka_sink
    from privstream.operators.shard_operator import END_OF_INPUT
    from pyflink.common import Types
    from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor
    from pyflink.table import StreamTableEnvironment

    def events_of(row: Any):
        name, record = decode(row[0])
        if name == "EventBatch":
            for event in record["events"]:
                yield event["item"]

    class CountPerItem(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, item: int, ctx: KeyedProcessFunction.Context):
            current = self.count.value()
            if current is None:  # first event of this item: emit its count at the end of input
                ctx.timer_service().register_event_time_timer(END_OF_INPUT)
            self.count.update((current or 0) + 1)

        def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
            yield f"{ctx.get_current_key()}:{self.count.value()}".encode()

    env = HeavyHittersJob(job_config(bootstrap, topic, epoch=1, bundle_size=10_000, k=1)).environment(
        ensure_jar_urls()
    )
    t_env = StreamTableEnvironment.create(env)
    rows = events_source(t_env, bootstrap=bootstrap, topic=topic, group_id="naive", stop_offsets=stop_offsets)
    counts = (
        rows.flat_map(events_of, output_type=Types.LONG())
        .key_by(lambda x: x, key_type=Types.LONG())
        .process(CountPerItem(), output_type=BYTES)
    )
    counts.sink_to(
        kafka_sink(
            bootstrap=bootstrap, topic=f"{topic}-naive-counts", transactional_id_prefix="privstream-naive"
        )
    )
    start = time.monotonic()
    env.execute("naive per-record keyed count")
    return time.monotonic() - start


def ensure_jar_urls() -> list[str]:
    return [p.resolve().as_uri() for p in ensure_connector_jars()]


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_with_checkpoint_sampling(config: HeavyHittersConfig, ckpt_dir: Path) -> tuple[float, list[int]]:
    """Run the job; sample the size of every completed checkpoint (``chk-N`` with ``_metadata``)."""
    sizes: dict[str, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for meta in ckpt_dir.rglob("chk-*/_metadata"):
                try:
                    sizes[str(meta.parent)] = dir_size(meta.parent)
                except FileNotFoundError:
                    pass
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        seconds = run_privstream(config)
    finally:
        done.set()
        thread.join()
    return seconds, [sizes[k] for k in sorted(sizes, key=lambda p: int(p.rsplit("-", 1)[1]))]


def part1(opts: argparse.Namespace, bootstrap: str, tmp: str, results: dict[str, Any]) -> bool:
    """Part 1 (module docstring); False: stop after it (``--skip-naive``)."""
    t0 = time.monotonic()
    stops = produce(bootstrap, "bench-events", opts.events, opts.partitions, opts.batch, seed=1)
    print(f"produced {opts.events:,} events in {time.monotonic() - t0:.1f} s; end offsets {stops}")
    per_partition_msgs = -(-opts.naive_events // opts.batch // opts.partitions)
    naive_stops = {p: min(o, per_partition_msgs) for p, o in stops.items()}
    naive_events = sum(naive_stops.values()) * opts.batch
    ps_secs = run_privstream(
        job_config(
            bootstrap,
            "bench-events",
            k=opts.k,
            release_mode=opts.release_mode,
            epoch=opts.events,
            stop_offsets=stops,
            checkpoint_dir=f"{tmp}/ps",
        )
    )
    print(f"privstream job (k={opts.k}): {opts.events / ps_secs:,.0f} events/s")
    if opts.skip_naive:
        print(json.dumps({"k": opts.k, "events": opts.events, "seconds": round(ps_secs, 2)}))
        return
    naive_secs = run_naive(bootstrap, "bench-events", naive_stops)
    ps_rate, naive_rate = opts.events / ps_secs, naive_events / naive_secs
    results["throughput"] = {
        "privstream": {
            "events": opts.events,
            "seconds": round(ps_secs, 2),
            "events_per_s": round(ps_rate),
        },
        "naive_per_record": {
            "events": naive_events,
            "seconds": round(naive_secs, 2),
            "events_per_s": round(naive_rate),
        },
        "speedup": round(ps_rate / naive_rate, 1),
    }
    print(f"privstream job : {opts.events:>10,} events in {ps_secs:6.1f} s = {ps_rate:>10,.0f} events/s")
    print(
        f"naive per-record: {naive_events:>10,} events in {naive_secs:6.1f} s = {naive_rate:>10,.0f} events/s"
    )
    print(f"speed-up: {ps_rate / naive_rate:.1f}x (target >= 10x)")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--naive-events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--lengths", default="250000,1000000,4000000", help="part 2 stream lengths")
    parser.add_argument("--k", type=int, default=256, help="MG counters per partition")
    parser.add_argument("--release-mode", choices=("per-shard", "merged"), default=None, help="(part 1)")
    parser.add_argument("--skip-naive", action="store_true", help="part 1: time only the privstream job")
    parser.add_argument("--skip-part2", action="store_true")
    parser.add_argument("--only-part2", action="store_true", help="only the checkpoint sizes (part 2)")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    results: dict[str, Any] = {}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="bench-flink-") as tmp:
        bootstrap = broker.bootstrap
        if not opts.only_part2 and not part1(opts, bootstrap, tmp, results):
            return
        if not opts.skip_part2:
            rows = []
            for n in (int(x) for x in opts.lengths.split(",")):
                topic = f"bench-len-{n}"
                stops = produce(bootstrap, topic, n, opts.partitions, opts.batch, seed=2)
                ckpt = Path(tmp) / f"len-{n}"
                secs, sizes = run_with_checkpoint_sampling(
                    job_config(
                        bootstrap,
                        topic,
                        k=opts.k,
                        epoch=n,
                        checkpoint_interval=timedelta(seconds=1),
                        stop_offsets=stops,
                        checkpoint_dir=str(ckpt),
                        releases_topic=f"{topic}-rel",
                        ledger_topic=f"{topic}-ledger",
                        ledger_id=topic,
                    ),
                    ckpt,
                )
                rows.append(
                    {
                        "events": n,
                        "seconds": round(secs, 1),
                        "checkpoints": len(sizes),
                        "max_checkpoint_bytes": max(sizes, default=0),
                        "median_checkpoint_bytes": int(np.median(sizes)) if sizes else 0,
                    }
                )
                print(
                    f"stream {n:>10,} events: {len(sizes):3d} checkpoints, "
                    f"max {max(sizes, default=0):,} B, median {rows[-1]['median_checkpoint_bytes']:,} B"
                )
            results["checkpoint_size"] = rows
    if opts.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
