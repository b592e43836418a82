"""Issue 22: on every time-epoch path, WHICH epochs (windows, steps) are released is a function of the
public punctuation schedule only, never of the events.

The adversarial neighbouring pair of the add/remove-one-event relation that every time-epoch release
states: stream A whose ONLY event of the first epoch (substream, step) is one early event, and
B = A without it. A release whose existence depended on that event would be a noiseless function of
one event, and no (ε, δ) would hold. For each path — the heavy-hitters job (merged and per-shard
releases), the sliding-window job in event time, the continual-monitor job — the pair must give the
same transcript: the same released epochs with the same public fields (guarantee, relation, window),
and, under the same noise, identical releases wherever the removed event is not read. The removed
``--operator window`` variant failed this (A released epochs [0, 1], B only [1]: shown through the
real job by ``tests/test_flink_transcript.py`` run with that operator before its removal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
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


# --- the public operator (privstream.flink): a user's elements, sharded inside the operator ------


def operator_epochs(elements: list[Any], spec: SketchSpec, shards: int) -> dict[int, Any]:
    """The public operator's logic without Flink: each element's (shard, payload) from
    :func:`~privstream.operators.elements.element_payload`, one element per message in stream order,
    the declared schedule's punctuations at 0 and at the end; epoch -> merged sketch."""
    from privstream.operators.elements import element_payload
    from privstream.operators.shard_logic import EpochMerger, ShardSketcher

    policy = TimeEpochs(EPOCH_MS)
    sketchers = [ShardSketcher(s, spec, policy, {}, ShardProgress(), shards) for s in range(shards)]
    merger, out = EpochMerger(shards, spec), {}
    routed: list[list[Any]] = [[] for _ in range(shards)]
    for element in elements:
        shard, payload = element_payload(
            element, user_level=False, shard_key="item", shards=shards, needs_time=True
        )
        routed[shard].append(payload)
    for shard, sketcher in enumerate(sketchers):
        closed = sketcher.add(WatermarkPayload("schedule", 0))[0]
        for payload in routed[shard]:
            closed += sketcher.add(payload)[0]
        closed += sketcher.add(WatermarkPayload("schedule", HORIZON))[0] + sketcher.finish()
        for message in closed:
            out.update({m.epoch: spec.load_merged(m.data) for m in merger.add(message)})
    return out


def test_public_operator_one_early_element_changes_only_its_epoch_by_cor_7_2() -> None:
    """Elements (item, user, ms) as a user's DataStream holds them: the early element's removal
    changes exactly its own epoch, by one signed step on at most k counters (Cor. 7.2), and leaves
    every other epoch — and every other shard's stream — unchanged, though it shifts every later
    position of its shard."""
    from tests.test_privacy_neighbours import one_signed_step

    spec = SketchSpec("mg", 4, release_mode="merged")
    elements = [(x, None, t) for x, t in hh_stream(True)]
    a, b = operator_epochs(elements, spec, 3), operator_epochs(elements[1:], spec, 3)
    assert sorted(a) == sorted(b) == [0, 1, 2, 3]
    assert {e: one_signed_step(a[e].counters(), b[e].counters(), 4) for e in a} == {0: 1, 1: 0, 2: 0, 3: 0}


# --- the SQL form (privstream.flink.private_top_items): rows in, the view's rows out --------------


def sql_view(rows: list[Any]) -> list[Any]:
    """The SQL bridge without Flink: each source row through the view's row map (``_event``), the
    public operator's logic (:func:`operator_epochs`, 3 shards, merged MG k = 4), each epoch of the
    declared schedule [0, HORIZON) released under seeded noise (one source per epoch, the same for
    both streams), and each release through the view's row writer (``_Rows``)."""
    from privstream.accounting import Budget
    from privstream.flink.sql import _event, _Rows
    from privstream.mechanisms import release
    from privstream.noise import SeededRandomSource

    sketches = operator_epochs([_event(r) for r in rows], SketchSpec("mg", 4, release_mode="merged"), 3)
    to_rows, view = _Rows(EPOCH_MS, (0, HORIZON)), []
    for epoch in range(HORIZON // EPOCH_MS):
        rng = SeededRandomSource(f"sql-pair:{epoch}")
        view += list(to_rows(release(sketches[epoch], Budget(1.0, 1e-6), rng=rng, epoch=epoch)))
    return view


@pytest.mark.parametrize("time_type", ["BIGINT", "TIMESTAMP", "TIMESTAMP_LTZ"])
def test_sql_view_one_early_row_changes_only_its_window(time_type: str) -> None:
    """The SQL form's relation (docs/privacy.md): add/remove one row of the source query, its window
    decided by its own time. The pair: the early row alone in window 0, then 60 rows in windows 2-3.
    Both views hold every window of the schedule (one 'empty' row where nothing is released), in the
    same order with the same public columns; under the same noise every row of windows 1-3 is
    identical, and window 0 is the only place the removed row is read (Cor. 7.2 step, shown above
    for the operator). Event times arrive in each SQL type the view reads."""
    from datetime import UTC, datetime

    from pyflink.common import Row
    from pyflink.common.time import Instant

    def when(ms: int) -> Any:
        if time_type == "BIGINT":
            return ms
        if time_type == "TIMESTAMP":  # naive, read as UTC
            return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)
        return Instant.of_epoch_milli(ms)

    rows = [Row(x, None, when(t)) for x, t in hh_stream(True)]
    a, b = sql_view(rows), sql_view(rows[1:])
    windows = [(w * EPOCH_MS, (w + 1) * EPOCH_MS) for w in range(4)]
    for view in (a, b):
        assert sorted({(r[0], r[1]) for r in view}) == windows  # every window of the schedule
    # the public columns per window (window, epoch, ε, δ, mechanism, guarantee): the same in both
    public_columns = [sorted({(r[0], r[1], r[2], r[6], r[7], r[8], r[9]) for r in v}) for v in (a, b)]
    assert public_columns[0] == public_columns[1] and len(public_columns[0]) == 4
    later = [r for r in a if r[2] > 0], [r for r in b if r[2] > 0]
    assert later[0] == later[1]  # windows 1-3: identical rows, noise included
    assert [r[3] for r in later[0] if r[2] == 1] == ["empty"]  # no row falls in window 1


# --- the public sliding-window operator (privstream.flink.private_sliding_window), event time -----


def operator_windows(early: bool) -> tuple[list[dict[str, Any]], list[dict[tuple[int, int], np.ndarray]]]:
    """The public sliding-window operator's logic without Flink: elements ``(item, None, ms)`` sharded
    by :func:`~privstream.operators.elements.element_payload`, one per call of
    :meth:`WindowShardLogic.add_events` in stream order, a punctuation at every substream end up to
    8 W sent to every shard. Shard 0's only element of substream 0 is the early one (time 5); both
    shards get 200 elements in substreams 2..5. Returns the releases (in order) and, after every
    punctuation, every live PCMS table of every shard keyed (shard, substream)."""
    from privstream.operators.elements import element_payload

    settings = _event_settings()
    shards = settings.shards
    logic = [WindowShardLogic(settings, s) for s in range(shards)]
    keys = keys_in_shard(0, shards, 4) + keys_in_shard(1, shards, 4)
    times = np.linspace(2 * TW, 6 * TW - 1, 200).astype(np.int64)
    elements = [(keys[1 + i % 7], None, int(t)) for i, t in enumerate(times)]
    if early:
        elements.insert(0, (keys[0], None, 5))
    releases: list[dict[str, Any]] = []
    tables: list[dict[tuple[int, int], np.ndarray]] = []
    sent = 0
    for tick in range(TW, 8 * TW + 1, TW):
        while sent < len(elements) and elements[sent][2] < tick:
            shard, payload = element_payload(
                elements[sent], user_level=False, shard_key="item", shards=shards, needs_time=True
            )
            assert logic[shard].add_events(payload, b"", sent, "events") == []  # nothing late or ahead
            sent += 1
        for shard in range(shards):  # the Punctuation element, broadcast to every shard in order
            out = logic[shard].punctuate(tick, b"", tick, "events")
            releases += [decode(data)[1] for kind, data in out if kind == "release"]
        tables.append(
            {(s, sub.index): sub.tables.copy() for s in range(shards) for sub in logic[s].sketch.substreams()}
        )
    return releases, tables


def test_public_sliding_window_one_early_element_changes_only_its_substream_by_lemma_4_1() -> None:
    """Removing the early element (shard 0, substream 0) changes only that substream's PCMS tables —
    each PCMS whose range holds it by one on ``depth`` counters (DPSW Lemma 4.1's sensitivity) — and
    nothing of shard 1; the same releases happen with the same public fields, and every release
    whose window no longer reads substream 0 of shard 0 is identical."""
    (a, tables_a), (b, tables_b) = operator_windows(True), operator_windows(False)
    depth = _event_settings().depth
    assert [(r["shard"], r["window_end"]) for r in a] == [
        (s, TW * i - 1) for i in range(1, 9) for s in (0, 1)
    ]
    same_transcript(a, b, "window_end")
    changed = 0
    for x, y in zip(tables_a, tables_b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            diff = x[key] - y[key]
            if key != (0, 0):
                assert not diff.any(), key
                continue
            assert set(np.unique(diff).tolist()) <= {0, 1}
            per_pcms = diff.reshape(len(diff), -1).sum(axis=1)
            assert set(per_pcms.tolist()) <= {0, depth} and per_pcms.any()
            changed += 1
    assert changed  # substream 0 of shard 0 was live, and differed, while it was read
    reads_it = [r["shard"] == 0 and r["window_start"] < TW for r in a]
    assert timeless(a[0]) != timeless(b[0]) and reads_it[0]
    for x, y, read in zip(a, b, reads_it, strict=True):
        if not read:  # shard 1, or a window past substream 0: identical, noise included
            assert timeless(x) == timeless(y)


# --- the public continual operator (privstream.flink.private_continual_heavy_hitters) -------------


def continual_operator_transcript(with_early: bool) -> tuple[list[dict[str, Any]], list[list[bytes]]]:
    """The public continual operator's logic without Flink: elements ``(item, None, ms)`` routed to
    nodes by :func:`~privstream.operators.elements.element_payload` (the item's hash, 3 nodes), each
    node fed its elements in order between the declared schedule's punctuations at 0 and 12 steps,
    then the aggregator. The early element (item 5, step 0) is the only element of step 0. Same
    noise secret and session for both streams. Returns the releases and each node's updates."""
    from privstream.operators.elements import element_payload

    s = replace(continual_settings(), noise_secret="ab" * 32, session="pair")
    aggregator, releases = ContinualAggregator(s), []
    elements = [(5, None, 5)] * with_early + [
        (x, None, t * STEP_MS + 5 + x) for t in range(2, 12) for x in (0, 1, 2, 3, 4, 6)
    ]
    routed: list[list[Any]] = [[] for _ in range(s.nodes)]
    for element in elements:
        node, payload = element_payload(
            element, user_level=False, shard_key="item", shards=s.nodes, needs_time=True
        )
        routed[node].append(payload)
    updates: list[list[bytes]] = []
    for node in range(s.nodes):
        runner = ContinualNode(node, s, None, {}, ShardProgress())
        out = runner.add(WatermarkPayload("schedule", 0))[0]
        for payload in routed[node]:
            out += runner.add(payload)[0]
        out += runner.add(WatermarkPayload("schedule", 12 * STEP_MS))[0] + runner.finish()
        updates.append([_without_time(u) for u in out])
        releases += [decode(r)[1] for u in out for r in aggregator.add(u)]
    return releases, updates


def _without_time(update: bytes) -> bytes:
    """A ContinualUpdate without its wall-clock ``update_time``, re-encoded for comparison."""
    from privstream.connectors.avro_codec import encode

    value = decode(update)[1]
    return encode("ContinualUpdate", {**value, "update_time": 0})


def test_public_continual_operator_one_early_element_changes_only_its_node_by_lemma_3() -> None:
    """Add/remove one element (the early one): the same steps 1..12 are released with the same public
    fields, and every node but the early element's own sends byte-identical updates (noise included):
    the element changes one step of one node's stream (Chan et al. Lemma 3 covers that node's
    transcript), though its node's every later position shifts."""
    from privstream.operators.elements import element_payload

    a, updates_a = continual_operator_transcript(True)
    b, updates_b = continual_operator_transcript(False)
    assert [r["epoch"] for r in a] == [r["epoch"] for r in b] == list(range(1, 13))
    for x, y in zip(a, b, strict=True):
        assert public(x) == public(y)
    early_node = element_payload((5, None, 5), user_level=False, shard_key="item", shards=3, needs_time=True)[
        0
    ]
    for node in range(3):
        assert len(updates_a[node]) == len(updates_b[node]) == 12
        if node != early_node:
            assert updates_a[node] == updates_b[node]
    assert updates_a[early_node] != updates_b[early_node]  # the element is read, by its own node
