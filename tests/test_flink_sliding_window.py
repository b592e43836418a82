"""The ``sliding-window`` Flink job on the embedded broker: one run with an injected failure after a
checkpoint that holds sketch state. Every release (one per shard and substream) is committed once,
or, since the embedded broker still shows records of aborted transactions to ``read_committed``
readers (docs/stack-facts.md), all its copies are identical (keyed noise); each equals a Flink-free
reference — the core DPSW-Sketch (Wang–Wang–Chen KDD 2024) fed the shard's items under the same
key — and the state after every release, also after the restore, is byte-identical to the core's.
The ledger holds exactly one charge for the run, which every release names."""

from __future__ import annotations

import hashlib
import hmac
import time

import numpy as np
import pytest
from privstream.jobs.sliding_window import SlidingWindowConfig, start
from privstream.operators.faults import TestFaults
from privstream.operators.window_logic import WindowSettings

from privstream.window import DPSWSketch
from tests.flink_fixtures import PhasedProducer, fields_but, fresh_name, one_per, read_topic

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]

KEY = bytes(range(100, 132))  #: the injected submission key (production: the launcher's CSPRNG secret)
SHARDS, EVENTS, W, WINDOW, DOMAIN, GAMMA = 2, 8000, 250, 1000, 2001, 0.05
QUERIES = (1, 2, 3, 10, 100)


def test_job_releases_every_substream_once_across_a_failure(flink_broker, tmp_path) -> None:
    bootstrap, prefix = flink_broker.bootstrap, fresh_name("window")
    topic = f"{prefix}-events"
    phased = PhasedProducer(bootstrap, topic, partitions=SHARDS, events=EVENTS, batch_size=250)
    first_half_shard0 = int(np.count_nonzero(phased.parts[: phased.half] == 0))
    settings = WindowSettings(
        window=WINDOW, substream=W, checkpoints=(W, 16, 1), budget_ratio=0.5, depth=3, width=128,
        epsilon=1.0, delta=1e-6, domain_size=DOMAIN, gamma=GAMMA, shards=SHARDS, queries=QUERIES,
        submission_key=KEY,
    )  # fmt: skip
    config = SlidingWindowConfig(
        settings,
        bootstrap,
        topic=topic,
        releases_topic=f"{prefix}-releases",
        dlq_topic=f"{prefix}-dlq",
        ledger_topic=f"{prefix}-ledger",
        ledger_id=f"sliding-window/{prefix}",
        checkpoint_interval_ms=500,
        faults=TestFaults(fail_marker=str(tmp_path / "failed"), fail_after=first_half_shard0 + 500),
        expose_states_topic=f"{prefix}-states",
    )
    phased.first()
    began = time.monotonic()
    job, prepared = start(config)
    try:  # a committed release proves a completed checkpoint holding sketch state before the failure
        assert read_topic(bootstrap, config.releases_topic, expect=1, idle_s=0.1, timeout_s=90)
        stream = phased.rest()
        items = {p: np.concatenate(stream.batches[p]) for p in range(SHARDS)}
        expected = sum(len(v) // W for v in items.values())
        releases = read_topic(bootstrap, config.releases_topic, expect=expected, idle_s=2.0, timeout_s=120)
        states = read_topic(bootstrap, config.expose_states_topic, expect=expected, idle_s=0.5, timeout_s=30)
        letters = read_topic(bootstrap, config.dlq_topic, idle_s=0.5, timeout_s=20)
        ledger = read_topic(bootstrap, config.ledger_topic, idle_s=0.5, timeout_s=20)
        seconds = time.monotonic() - began
    finally:
        job.cancel().result()
    assert (tmp_path / "failed").exists()  # the failure did happen, in the second half of shard 0
    by_substream = one_per(
        releases, lambda r: (r["shard"], r["substream"]), fields_but(releases, "release_time")
    )
    snapshots = one_per(states, lambda r: (r["shard"], r["epoch"]), fields_but(states, "created_time"))
    assert (
        sorted(by_substream)
        == sorted(snapshots)
        == [(p, k) for p in range(SHARDS) for k in range(len(items[p]) // W)]
    )
    entries = [r for r in ledger if r.get("ledger_id") == config.ledger_id and "sequence" in r]
    assert [e["sequence"] for e in entries] == [1]  # charged once for the whole run
    charge = prepared.settings.charge
    for p in range(SHARDS):
        key = hmac.new(KEY, f"privstream sliding-window shard {p}".encode(), hashlib.sha256).digest()
        ref = DPSWSketch(settings.params, domain=range(DOMAIN), noise_key=key)
        for k in range(len(items[p]) // W):
            ref.update_batch(items[p][k * W : (k + 1) * W])
            release, state = by_substream[(p, k)], snapshots[(p, k)]
            assert state["data"] == ref.to_bytes(), (p, k)  # byte-identical, also after the restore
            assert release["position"] == (k + 1) * W
            assert [e["estimate"] for e in release["estimates"]] == ref.estimate_batch(QUERIES).tolist()
            assert [(h["item"], h["estimate"]) for h in release["heavy_hitters"]] == ref.heavy_hitters(GAMMA)
            assert (release["ledger_id"], release["ledger_sequence"]) == (config.ledger_id, 1)
            assert release["ledger_entry_hash"] == charge.entry_hash
            assert "replace one event" in release["neighbour_relation"]
    malformed = {(r["partition"], r["offset"]) for r in letters}
    assert len(malformed) == 1 and next(iter(malformed))[0] == 1  # PhasedProducer's malformed message
    heavy = by_substream[(0, len(items[0]) // W - 1)]["heavy_hitters"]
    print(
        f"\nsliding-window: {len(by_substream)} releases ({len(releases)} records read), "
        f"{len(states)} states, {seconds:.1f} s from submission; shard 0's last heavy hitters {heavy}"
    )
