"""Issue 22: on every time-epoch path, WHICH epochs (windows, steps) are released is a function of the
public punctuation schedule only, never of the events.

The adversarial neighbouring pair of the add/remove-one-event relation that every time-epoch release
states: stream A whose ONLY event of the first epoch (substream, step) is one early event, and
B = A without it. A release whose existence depended on that event would be a noiseless function of
one event, and no (ε, δ) would hold. For each path — the heavy-hitters job (merged and per-shard
releases), the sliding-window job in event time, the continual-monitor job — the pair must give the
same transcript: the same released epochs with the same public fields (guarantee, relation, window),
and, under the same noise, identical releases wherever the removed event is not read. The removed
``--operator window`` variant failed this (A released epochs [0, 1], B only [1]); the real-Flink
transcript test is ``tests/test_flink_transcript.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode
from privstream.operators.continual_logic import ContinualAggregator, ContinualNode
from privstream.operators.epochs import ShardProgress, TimeEpochs
from privstream.operators.payloads import EventPayload, WatermarkPayload
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.window_logic import WindowShardLogic

from tests.test_continual_logic import STEP_MS
from tests.test_continual_logic import settings as continual_settings
from tests.test_privacy_neighbours import EPOCH_MS, keys_in_shard, release_all, run_job
from tests.test_window_job_logic import TW, _event_settings, _tick, _timed

#: fields of a release that carry no data: the transcript's public part
VOLATILE = {"release_time", "items", "estimates", "heavy_hitters", "noisy_count", "sketch_size"}


def public(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in VOLATILE}


def timeless(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "release_time"}


def same_transcript(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> None:
    """Same released epochs (in order), each with the same public fields."""
    assert [r[key] for r in a] == [r[key] for r in b] and a
    for x, y in zip(a, b, strict=True):
        assert public(x) == public(y)


# --- heavy hitters: ShardSketcher -> EpochMerger -> EpochReleaser ------------------------------

SHARD0 = keys_in_shard(0, 3, 30)
HORIZON = 4 * EPOCH_MS


def hh_stream(with_early: bool) -> list[tuple[int, int]]:
    """[(item, ms)]: the early event alone in epoch 0 (shard 0), then 60 events in epochs 2 and 3."""
    later = [(SHARD0[1 + i % 6], 2 * EPOCH_MS + 30 * i) for i in range(60)]
    return [(SHARD0[0], 100)] * with_early + later


@pytest.mark.parametrize("mode", ["merged", "per-shard"])
def test_heavy_hitters_time_epochs_release_every_punctuated_epoch(mode: str) -> None:
    spec, policy = SketchSpec("mg", 4, release_mode=mode), TimeEpochs(EPOCH_MS)
    merged = [run_job(hh_stream(early), spec, policy, horizon=HORIZON) for early in (True, False)]
    assert merged[0][0].data != merged[1][0].data  # the pair differs: epoch 0 holds the event or not
    a, b = (release_all(m, spec, policy) for m in merged)
    assert [r["epoch"] for r in a] == [0, 1, 2, 3]  # epoch 1 has no event in either: released too
    same_transcript(a, b, "epoch")
    # only the removed event's epoch may differ (noise keyed by the epoch)
    assert [timeless(r) for r in a[1:]] == [timeless(r) for r in b[1:]]


# --- sliding window, event time: WindowShardLogic on punctuations ------------------------------


def window_transcript(with_early: bool) -> list[dict[str, Any]]:
    """Shard 0: the early event alone in substream 0 (time 5), 200 events in substreams 2..5,
    a punctuation at every substream end up to 8 W."""
    settings = _event_settings()
    mine = keys_in_shard(0, settings.shards, 7)
    items = np.array(mine[1:] * 40, dtype=np.int64)[:200]
    times = np.sort(np.linspace(2 * TW, 6 * TW - 1, 200).astype(np.int64))
    if with_early:
        items, times = np.r_[mine[0], items], np.r_[5, times]
    logic = WindowShardLogic(settings, 0)
    out = []
    sent = 0
    for tick in range(TW, 8 * TW + 1, TW):
        upto = int(np.searchsorted(times, tick))
        if upto > sent:
            out += logic.process(_timed(items[sent:upto], times[sent:upto]), tick, "events")
            sent = upto
        out += logic.process(_tick(tick), tick + 1, "events")
    return [decode(data)[1] for kind, data in out if kind == "release"]


def test_sliding_window_event_time_releases_every_substream_end() -> None:
    a, b = window_transcript(True), window_transcript(False)
    assert timeless(a[0]) != timeless(b[0])  # the pair differs: the first window reads the event
    assert [r["window_end"] for r in a] == [TW * i - 1 for i in range(1, 9)]
    same_transcript(a, b, "window_end")
    for x, y in zip(a, b, strict=True):
        if x["window_start"] >= TW:  # the window no longer reads substream 0: identical
            assert timeless(x) == timeless(y)


# --- continual monitor: ContinualNode per partition -> ContinualAggregator ---------------------


def continual_transcript(with_early: bool) -> list[dict[str, Any]]:
    """Three nodes; node 0's only event of step 1 is the early one; every node has 4 events a step
    in steps 3..12; each node is punctuated at every step end."""
    s = continual_settings()
    aggregator = ContinualAggregator(s)
    releases: list[dict[str, Any]] = []
    feed: Callable[[list[bytes]], None] = lambda updates: releases.extend(  # noqa: E731
        decode(r)[1] for u in updates for r in aggregator.add(u)
    )
    for node in range(s.nodes):
        runner = ContinualNode(node, s, None, {}, ShardProgress())
        feed(runner.add(WatermarkPayload("p", 0))[0])
        for t in range(12):
            items = np.array([node, 1, 2, 3] if t >= 2 else [5] * (with_early and node == 0 and t == 0))
            if len(items):
                feed(
                    runner.add(EventPayload(items.astype(np.int64), np.full(len(items), t * STEP_MS + 5)))[0]
                )
            feed(runner.add(WatermarkPayload("p", (t + 1) * STEP_MS))[0])
    return releases


def test_continual_monitor_releases_every_punctuated_step() -> None:
    a, b = continual_transcript(True), continual_transcript(False)
    assert [r["epoch"] for r in a] == list(range(1, 13))
    assert [r["epoch"] for r in a] == [r["epoch"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert public(x) == public(y)
