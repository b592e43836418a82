"""The ``ldp-heavy-hitters`` Flink job on the embedded broker: clients randomise against the state
the job publishes, the job releases one top-k per epoch, and an injected failure mid-stream restores
to every epoch released once. The embedded broker still shows records of aborted transactions to
``read_committed`` readers (docs/stack-facts.md), so a release of the failed attempt may appear
too: it must then be identical to its committed replay (replay-stable decays)."""

from __future__ import annotations

import random

import pytest
from privstream.connectors.ldp_producer import LdpProducer
from privstream.jobs.ldp_heavy_hitters import LdpJobConfig, start
from privstream.operators.faults import TestFaults
from privstream.operators.ldp_logic import LdpServerSettings

from privstream.ldp import make_client
from privstream.noise.rng import SeededRandomSource
from tests.flink_fixtures import fresh_name, read_topic

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]

D, K, EPOCH, REPORTS = 100, 5, 100, 600


def _skewed(n: int, seed: int) -> list[int]:
    return random.Random(seed).choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)], k=n)


def test_job_releases_every_epoch_exactly_once_across_a_failure(flink_broker, tmp_path) -> None:
    prefix = fresh_name("ldp")
    settings = LdpServerSettings(
        scheme="cnr", epsilon=3.0, domain_size=D, k=K, deployment=prefix, warm_up=tuple(_skewed(300, 1)),
        epoch_reports=EPOCH, state_every=20,
    )  # fmt: skip
    config = LdpJobConfig(
        settings=settings,
        bootstrap=flink_broker.bootstrap,
        reports_topic=f"{prefix}-reports",
        state_topic=f"{prefix}-state",
        releases_topic=f"{prefix}-releases",
        dlq_topic=f"{prefix}-reports-dlq",
        checkpoint_interval_ms=500,
        faults=TestFaults(fail_marker=str(tmp_path / "failed"), fail_after=250),
    )
    job = start(config)
    try:
        client = make_client(settings.params, rng=SeededRandomSource(2))
        with LdpProducer(
            flink_broker.bootstrap,
            client,
            config.reports_topic,
            deployment=prefix,
            state_topic=config.state_topic,
        ) as producer:
            for value in _skewed(REPORTS, 3):
                producer.submit(value)
            producer.flush()
        releases = read_topic(
            flink_broker.bootstrap, config.releases_topic, expect=REPORTS // EPOCH, timeout_s=240
        )
        letters = read_topic(flink_broker.bootstrap, config.dlq_topic, idle_s=2.0, timeout_s=20)
        states = read_topic(flink_broker.bootstrap, config.state_topic, idle_s=1.0, timeout_s=20)
    finally:
        job.cancel().result()
    assert (tmp_path / "failed").exists()  # the failure did happen, after 250 reports
    by_epoch: dict[int, dict] = {}
    for r in releases:  # an aborted attempt's copy must equal the committed one (but for its time)
        content = {k: v for k, v in r.items() if k != "release_time"}
        assert by_epoch.setdefault(r["epoch"], content) == content, r["epoch"]
    releases = [by_epoch[e] for e in sorted(by_epoch)]
    assert sorted(by_epoch) == list(range(1, REPORTS // EPOCH + 1))
    assert [r["reports"] for r in releases] == [EPOCH * e for e in range(1, REPORTS // EPOCH + 1)]
    assert all(len(r["items"]) == K and "event-level" in r["privacy_unit"] for r in releases)
    assert 0 in {i["item"] for i in releases[-1]["items"]}  # the head (≈ 40 % of the stream)
    assert not letters  # every report named a version the server still held
    assert states[0]["version"] == 0 and len(states) > 1
    print(
        f"\nldp-heavy-hitters: {len(releases)} releases, {len(states)} states, last top-k {releases[-1]['items']}"
    )
