"""The ``ldp-heavy-hitters`` Flink job on the embedded broker: clients randomise against the state
the job publishes, the job releases one top-k per epoch, and an injected failure mid-stream restores
to every epoch released once. The embedded broker still shows records of aborted transactions to
``read_committed`` readers (docs/stack-facts.md), so a release of the failed attempt may appear
too: with this single-partition reports topic it must then be identical to its committed replay
(replay-stable decays; with several partitions it need not be, docs/ldp.md "Exactly once"). A checkpoint is
triggered and completed before the failure can happen (the reports that trigger it are sent only
then), and every read waits for an expected count. The first reports go one per message, the rest as
``LdpReportBatch`` messages of 100 (``submit_many``; the failure at 250 falls inside a batch, and
every release is at its exact report count)."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from privstream.connectors.avro_codec import encode
from privstream.connectors.clients import free_port, kafka_producer
from privstream.connectors.ldp_producer import LdpProducer, report_to_record
from privstream.connectors.ldp_state import state_from_record
from privstream.jobs.ldp_heavy_hitters import LdpJobConfig, start
from privstream.operators.ldp_logic import LdpServerSettings
from privstream.operators.test_hooks import TestHooks

from privstream.ldp import LdpReport, make_client
from privstream.noise.rng import SeededRandomSource
from tests.flink_fixtures import (
    fields_but,
    fresh_name,
    one_per,
    privstream_metrics,
    read_matching,
    read_topic,
    rest_get,
    trigger_checkpoint,
    wait_for_metrics,
)

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]

D, K, EPOCH, REPORTS = 100, 5, 100, 600
FIRST = 200  #: reports sent before the checkpoint that must complete before the failure (at 250)
STALE = 2  #: reports naming a version never published, sent last: the expected dead letters
BATCH = 100  #: reports per batch message after the checkpoint


def _skewed(n: int, seed: int) -> list[int]:
    return random.Random(seed).choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)], k=n)


def test_job_releases_every_epoch_exactly_once_across_a_failure(flink_broker, tmp_path) -> None:
    prefix, port = fresh_name("ldp"), free_port()
    settings = LdpServerSettings(
        scheme="cnr", epsilon=3.0, domain_size=D, k=K, deployment=prefix, warm_up=tuple(_skewed(300, 1)),
        epoch_reports=EPOCH, state_every=20,
    )  # fmt: skip
    marker = tmp_path / "failed"
    config = LdpJobConfig(
        settings=settings,
        bootstrap=flink_broker.bootstrap,
        reports_topic=f"{prefix}-reports",
        state_topic=f"{prefix}-state",
        releases_topic=f"{prefix}-releases",
        dlq_topic=f"{prefix}-reports-dlq",
        checkpoint_interval=timedelta(milliseconds=500),
        flink_conf=(("rest.port", str(port)),),
        hooks=TestHooks(fail_marker=str(marker), fail_after=250),
        run_id=settings.run_id.hex(),  # as `privstream run ldp-heavy-hitters` sets it
    )
    job = start(config)
    job_id = str(job.get_job_id())
    values = _skewed(REPORTS, 3)
    try:
        client = make_client(settings.params, rng=SeededRandomSource(2))
        with LdpProducer(
            flink_broker.bootstrap,
            client,
            config.reports_topic,
            deployment=prefix,
            state_topic=config.state_topic,
        ) as producer:
            for value in values[:FIRST]:
                producer.submit(value)
            producer.flush()
            # Both first epochs are applied and committed by a completed checkpoint, and the
            # failure (at 250 reports) cannot have happened: its reports are not sent yet.
            read_topic(flink_broker.bootstrap, config.releases_topic, expect=FIRST // EPOCH, timeout_s=240)
            trigger_checkpoint(port, job_id)
            assert not marker.exists()
            for begin in range(FIRST, REPORTS, BATCH):  # batches, one state each (refreshed between)
                producer.submit_many(values[begin : begin + BATCH])
            producer.flush()
        deadline = time.monotonic() + 120
        while not rest_get(port, f"/jobs/{job_id}/exceptions")["exceptionHistory"]["entries"]:
            assert time.monotonic() < deadline, "Flink did not register the injected failure"
            time.sleep(0.2)
        releases = read_topic(
            flink_broker.bootstrap, config.releases_topic, expect=REPORTS // EPOCH, timeout_s=240
        )
        stale = report_to_record(LdpReport(client.scheme, client.parameters, b"\x01", state_version=10**6))
        sender = kafka_producer(flink_broker.bootstrap)
        try:  # sent after every good report: once both are dead-lettered, all earlier ones were applied
            for _ in range(STALE):
                sender.send(config.reports_topic, value=encode("LdpReport", stale))
            stale_batch = {**stale, "count": 2, "payloads": b"\x01\x02"}
            stale_batch.pop("payload")
            sender.send(config.reports_topic, value=encode("LdpReportBatch", stale_batch))  # one letter
            sender.flush()
        finally:
            sender.close()
        letters = read_topic(flink_broker.bootstrap, config.dlq_topic, expect=STALE + 1, timeout_s=120)
        # the server operator's metrics since the restore (a restarted task's counters start at 0):
        # the stale reports dead-lettered, reports applied, releases written
        shown = wait_for_metrics(
            "the REST API", lambda: privstream_metrics(port),
            {"deadLettered": STALE + 1, "eventsCounted": lambda v: v > 0, "releases": lambda v: v > 0},
        )  # fmt: skip
        assert shown["stateBytes"] > 0
        last = max(r["state_version"] for r in releases)
        # version 0 twice (the launcher's, then the job's re-announcement on its first message)
        states = read_matching(
            flink_broker.bootstrap, config.state_topic, lambda s: s["version"] in (0, last), expect=3
        )
    finally:
        job.cancel().result()
    assert marker.exists()  # the failure did happen, after 250 reports
    # an aborted attempt's copy must equal the committed one (but for its time)
    by_epoch = one_per(releases, lambda r: r["epoch"], fields_but(releases, "release_time"))
    releases = [by_epoch[e] for e in sorted(by_epoch)]
    assert sorted(by_epoch) == list(range(1, REPORTS // EPOCH + 1))
    assert [r["reports"] for r in releases] == [EPOCH * e for e in range(1, REPORTS // EPOCH + 1)]
    assert all(len(r["items"]) == K and "event-level" in r["privacy_unit"] for r in releases)
    assert 0 in {i["item"] for i in releases[-1]["items"]}  # the head (≈ 40 % of the stream)
    # exactly the two stale reports and the stale batch (one letter, its bytes): every good report
    # named a version the server still held
    assert len(letters) == STALE + 1
    assert all(r["error"].startswith("stale-state (unknown)") for r in letters[:STALE])
    assert letters[STALE]["error"].startswith("batch: stale-state (unknown)")
    assert letters[STALE]["original_value"][:2] == b"\xc3\x01"
    assert states[0]["version"] == 0 and last > 0 and {s["version"] for s in states} == {0, last}
    assert [s["version"] for s in states].count(0) >= 2  # the job re-announced version 0 at its start
    # one run (the launcher's run id, kept across the restore); every digest matches its contents
    assert {s["run_id"] for s in states} == {settings.run_id}
    assert all(state_from_record(s).digest == s["digest"] for s in states)
    assert all(r["delta"] == 0.0 and r["warm_up_items"] == 300 for r in releases)
    assert all("any two items" in r["neighbour_relation"] for r in releases)
    # every release and dead letter names the run (privstream tail --run)
    assert {r["run_id"] for r in releases} == {r["run_id"] for r in letters} == {settings.run_id.hex()}
    print(
        f"\nldp-heavy-hitters: {len(releases)} releases, last state version {last}, "
        f"last top-k {releases[-1]['items']}"
    )
