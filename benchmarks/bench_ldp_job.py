"""Benchmark: reports/s of the LDP producer, of the ``ldp-heavy-hitters`` operator logic and job.

Part 0, the producer (``LdpProducer`` of a CNR client, d = 1000, k = 20, ε = 1, to the embedded
broker, following the deployment's state): ``submit`` one report per message against
``submit_many`` batches of ``--batch`` reports (one ``LdpReportBatch`` message each); the time
includes randomisation, encoding and the final flush.

Part 1, the operator logic alone (no Flink): ``LdpServerLogic.process`` plus state writes, with a
full history (1,025 kept versions): ``core_bytes`` every message and ``versions_bytes`` when a
version was made (the operator's policy before it kept the server in memory), the whole server
(``to_bytes``) after every message, no writes at all, the real operator body
(``LdpServerFunction.process_element`` on in-memory stand-ins of its Flink state: the states
written after a message with an output and every 64 messages, the messages since appended to a
list), and ``LdpReportBatch`` messages of ``--batch`` reports (the state written once per message). Clients follow the state as it is made (``--state-every``; the
batch clients between batches).

Part 2, the job: ``--reports`` CNR reports (d = 1000, k = 20, ε = 1, a Normal(500, 10) stream,
randomised against state version 0, which stays within ``max_lag``: a state every
max(100, reports/500) reports) are produced to the embedded
broker *before* the job starts, as batches of ``--batch`` (``--batch 1``: one per message); the
rate is the reports between the first and the last release over the time between them by the
releases' own ``release_time`` (the operator's clock when it made them: the transactional sink
shows a checkpoint's releases to ``read_committed`` readers all at once, so their arrival times
measure the checkpoint interval, not the job; JVM and Python worker start excluded).

Run (the machine is shared; never two heavy jobs at once)::

    flock /tmp/privstream-heavy.lock .venv/bin/python benchmarks/bench_ldp_job.py \
        --reports 200000 --epoch 10000 --batch 1000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from privstream.connectors.avro_codec import encode
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.ldp_producer import LdpProducer, batch_to_record, report_to_record
from privstream.jobs.ldp_heavy_hitters import LdpJobConfig, start
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings
from privstream.operators.ldp_operator import LdpServerFunction
from privstream.operators.unflushed import UnflushedMessages

from privstream.datagen import normal_items
from privstream.ldp import make_client
from privstream.noise.rng import SeededRandomSource

D, K = 1000, 20
ROOT = Path(__file__).resolve().parent.parent


def run_batches(logic: LdpServerLogic, client: Any, values: list[int], batch: int) -> float:
    """Reports/s of ``process`` on batch messages plus the state writes once per message."""
    seconds = 0.0
    for offset, begin in enumerate(range(0, len(values), batch)):
        client.update_state(logic.server.history.latest)  # the state refreshed between batches
        message = encode("LdpReportBatch", batch_to_record(client.encode_many(values[begin : begin + batch])))
        t0 = time.perf_counter()
        before = logic.latest_version
        logic.process(message, 0, offset, "reports")
        if logic.latest_version != before:
            logic.versions_bytes()
        logic.core_bytes()
        seconds += time.perf_counter() - t0
    return len(values) / seconds


def producer_rates(values: list[int], batch: int) -> dict[str, float]:
    """Reports/s of ``LdpProducer.submit`` (one message each) and ``submit_many`` (``batch`` each)."""
    from privstream.jobs.ldp_heavy_hitters import publish_initial_state

    settings = LdpServerSettings(
        scheme="cnr", epsilon=1.0, domain_size=D, k=K, deployment="bench-producer",
        warm_up=tuple(values[:5000]),
    )  # fmt: skip
    rates: dict[str, float] = {}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as ckpt:
        config = LdpJobConfig(settings, bootstrap=broker.bootstrap, checkpoint_dir=ckpt)
        publish_initial_state(config)
        client = make_client(settings.params)  # the CSPRNG, as in production
        with LdpProducer(
            broker.bootstrap, client, config.reports_topic, deployment="bench-producer"
        ) as producer:
            single = values[:20_000]
            t0 = time.perf_counter()
            for v in single:
                producer.submit(v)
            producer.flush()
            rates["single"] = len(single) / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for begin in range(0, len(values), batch):
                producer.submit_many(values[begin : begin + batch])
            producer.flush()
            rates["batched"] = len(values) / (time.perf_counter() - t0)
    return rates


def logic_rates(items: list[int], state_every: int, batch: int) -> dict[str, float]:
    settings = LdpServerSettings(
        scheme="cnr", epsilon=1.0, domain_size=D, k=K, deployment="bench", warm_up=tuple(items[:5000]),
        state_every=1,
    )  # fmt: skip
    sys.path.insert(0, str(ROOT))
    from tests.test_several_bad_messages import ContextStub, ListStateStub, ValueStateStub

    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource(1))
    operator = LdpServerFunction(settings, "reports")  # its Flink state: in-memory stand-ins
    operator.core, operator.versions = ValueStateStub(), ValueStateStub()
    operator.since = UnflushedMessages(ListStateStub())
    context = ContextStub()

    def run(values: list[int], mode: str) -> float:
        seconds = 0.0
        operator._logic, operator._written = logic, -1  # the operator's server in memory
        for offset, v in enumerate(values):
            client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
            message = encode("LdpReport", report_to_record(client.encode(v)))
            t0 = time.perf_counter()
            before = logic.latest_version
            if mode == "operator":
                list(operator.process_element((message, 0, offset), context))
                seconds += time.perf_counter() - t0
                continue
            logic.process(message, 0, offset, "reports")
            if mode == "whole":
                logic.to_bytes()
            elif mode == "split":
                if logic.latest_version != before:
                    logic.versions_bytes()
                logic.core_bytes()
            seconds += time.perf_counter() - t0
        return len(values) / seconds

    start = 5000
    while len(logic.server.history._states) <= settings.max_lag:  # fill: 1,025 versions kept
        run(items[start : start + 1000], "none")
        start += 1000
    object.__setattr__(settings, "state_every", state_every)
    rates = {}
    for mode in ("whole", "split", "none", "operator"):
        rates[mode] = run(items[start : start + 5000], mode)
        start += 5000
    rates["batch"] = run_batches(logic, client, items[start : start + 20_000], batch)
    rates["core_bytes"] = len(logic.core_bytes())
    rates["versions_bytes"] = len(logic.versions_bytes())
    rates["whole_bytes"] = len(logic.to_bytes())
    return rates


def job_rate(reports: int, epoch: int, batch: int) -> float:
    """Reports/s of the job between its first and its last release (JVM and worker start excluded)."""
    return job_rates(reports, epoch, batch)[0]


def job_rates(reports: int, epoch: int, batch: int) -> tuple[float, float]:
    """Reports/s of the job (between its first and last release; from its submission to its last
    release, JVM start included: ``benchmarks/bench_jobs.py``'s measure)."""
    from kafka import KafkaConsumer, KafkaProducer
    from privstream.connectors.avro_codec import decode

    items = (normal_items(reports + 5000, domain=D, std=10, seed=2) - 1).tolist()
    settings = LdpServerSettings(
        scheme="cnr", epsilon=1.0, domain_size=D, k=K, deployment="bench", warm_up=tuple(items[:5000]),
        epoch_reports=epoch, state_every=max(100, reports // 500),  # ≤ 500 versions: v0 stays kept
    )  # fmt: skip
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as ckpt:
        config = LdpJobConfig(settings, bootstrap=broker.bootstrap, checkpoint_dir=ckpt)
        from privstream.jobs.ldp_heavy_hitters import publish_initial_state

        publish_initial_state(config)
        client = make_client(settings.params, rng=SeededRandomSource(3))
        client.update_state(settings.initial_server().public_state())
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
        values = items[5000:]
        for begin in range(0, len(values), batch):
            if batch == 1:
                message = encode("LdpReport", report_to_record(client.encode(values[begin])))
            else:
                message = encode(
                    "LdpReportBatch", batch_to_record(client.encode_many(values[begin : begin + batch]))
                )
            producer.send(config.reports_topic, message)
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(
            config.releases_topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
            isolation_level="read_committed", fetch_max_wait_ms=100,
        )  # fmt: skip
        submitted = time.time()  # the releases' release_time is the operator's wall clock
        job = start(config)
        seen: dict[int, float] = {}
        deadline = time.monotonic() + 900
        try:
            while len(seen) < reports // epoch and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=100).values():
                    for record in records:
                        release = decode(record.value)[1]
                        # the operator's clock when it made the release: the sinks are transactional,
                        # so read_committed readers see a checkpoint's releases at once
                        seen.setdefault(release["reports"], release["release_time"] / 1000)
        finally:
            job.cancel().result()
            consumer.close()
        first, last = min(seen), max(seen)
        return (last - first) / (seen[last] - seen[first]), last / (seen[last] - submitted)


def bench_rows(reports: int, batch: int = 1000) -> list[tuple[str, str, int, float, str]]:
    """``benchmarks/bench_jobs.py``'s LDP rows: (job, setting, reports, seconds, note)."""
    values = (normal_items(reports + 5000, domain=D, std=10, seed=1) - 1).tolist()
    producer = producer_rates(values, batch)
    _, from_submission = job_rates(reports, 1000, batch)
    setting = f"CNR, d = {D}, k = {K}, ε = 1"
    note = "LDP rows: reports, not events; the producer times submit/submit_many to the broker's ack"
    return [
        ("LDP producer", f"{setting}, one report per message", 20_000, 20_000 / producer["single"], note),
        (
            "LDP producer",
            f"{setting}, batches of {batch:,}",
            len(values),
            len(values) / producer["batched"],
            note,
        ),
        ("ldp-heavy-hitters", f"{setting}, batches of {batch:,}", reports, reports / from_submission, note),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=20_000)
    parser.add_argument("--epoch", type=int, default=1000)
    parser.add_argument("--state-every", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000, help="reports per batch message")
    parser.add_argument("--skip-job", action="store_true")
    parser.add_argument("--skip-producer", action="store_true")
    args = parser.parse_args()
    if not args.skip_producer:
        values = (normal_items(max(args.reports, 25_000), domain=D, std=10, seed=4) - 1).tolist()
        p = producer_rates(values, args.batch)
        print(f"LDP producer (CNR, d = {D}, k = {K}, ε = 1, CSPRNG, embedded broker):")
        print(f"  one report per message: {p['single']:,.0f} reports/s")
        print(f"  batches of {args.batch:,} ({len(values):,} reports): {p['batched']:,.0f} reports/s")
    items = (normal_items(150_000, domain=D, std=10, seed=1) - 1).tolist()
    r = logic_rates(items, args.state_every, args.batch)
    print(
        f"operator logic (d = {D}, k = {K}, ε = 1, CNR, 1,025 versions kept, state every {args.state_every}):"
    )
    print(f"  whole server pickled per message ({r['whole_bytes']:,.0f} B): {r['whole']:,.0f} reports/s")
    print(
        f"  core per message ({r['core_bytes']:,.0f} B) + versions when made ({r['versions_bytes']:,.0f} B): "
        f"{r['split']:,.0f} reports/s"
    )
    print(f"  no state writes: {r['none']:,.0f} reports/s")
    print(f"  the operator (states written at outputs and every 64 messages): {r['operator']:,.0f} reports/s")
    print(f"  batch messages of {args.batch:,} (state written once per message): {r['batch']:,.0f} reports/s")
    if not args.skip_job:
        rate = job_rate(args.reports, args.epoch, args.batch)
        print(
            f"Flink job (embedded broker, {args.reports:,} reports in messages of {args.batch:,}, "
            f"one release per {args.epoch:,}): {rate:,.0f} reports/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
