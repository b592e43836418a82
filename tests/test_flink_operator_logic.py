"""The Flink-free bodies of the job's operators: payload decoding, epochs, shard sketching, merge.

These run in milliseconds; the real-Flink tests are in ``test_flink_heavy_hitters.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from privstream.connectors.avro_codec import encode
from privstream.operators.epochs import FINAL, CountEpochs, ShardProgress, TimeEpochs
from privstream.operators.payloads import (
    EndPayload,
    EventPayload,
    Payload,
    PayloadError,
    UserSetPayload,
    WatermarkPayload,
    decode_payload,
)
from privstream.operators.shard_logic import EpochMerger, ShardSketch, ShardSketcher
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.test_hooks import TestHooks

from privstream.sketches import Build, MisraGries, load_sketch, merge_in_order

MERGED_MG = SketchSpec("mg", 8, release_mode="merged")  #: the merged release path (PAMG's default)


def epoch_counters(spec: SketchSpec, data: bytes) -> dict[object, int]:
    """What an epoch's release input holds: the merged sketch's counters, or per shard the key-wise
    sum of the shard sketches' counters (each shard's sketch checked to be a sequential Alg. 1 one)."""
    loaded = spec.load_release_input(data)
    if not isinstance(loaded, list):
        assert loaded.build in (Build.MERGED, Build.PAMG_MERGED)
        return loaded.counters()
    total: dict[object, int] = {}
    for shard in loaded:
        assert isinstance(shard, MisraGries) and shard.build is Build.ALG1_SEQUENTIAL
        for x, c in shard.counters().items():
            total[x] = total.get(x, 0) + c
    return total


both_modes = pytest.mark.parametrize("mode", ["merged", "per-shard"])


def _batch(items: list[int], t0: int = 0, step: int = 1) -> bytes:
    events = [{"item": x, "user_id": None, "event_time": t0 + i * step} for i, x in enumerate(items)]
    return encode("EventBatch", {"events": events})


def test_decode_payload_kinds_and_errors() -> None:
    p = decode_payload(_batch([3, 1, 3]), user_sets=False)
    assert isinstance(p, EventPayload) and p.items.tolist() == [3, 1, 3] and p.times.tolist() == [0, 1, 2]
    mixed = encode("EventBatch", {"events": [{"item": "a", "user_id": None, "event_time": 5}]})
    assert decode_payload(mixed, user_sets=False).items == ["a"]
    end = decode_payload(encode("EndMarker", {"producer_id": "p", "events_sent": 9}), user_sets=False)
    assert end == EndPayload("p", 9)
    user = encode("UserSetEvent", {"user_id": 4, "items": [1, 2], "event_time": 7})
    assert decode_payload(user, user_sets=True) == UserSetPayload(4, (1, 2), 7)
    punct = encode("EpochWatermark", {"producer_id": "p", "watermark_ms": 5000})
    for user_sets in (False, True):  # punctuation is accepted by event- and user-level jobs
        assert decode_payload(punct, user_sets=user_sets) == WatermarkPayload("p", 5000)
    with pytest.raises(PayloadError, match="undecodable"):
        decode_payload(b"garbage", user_sets=False)
    with pytest.raises(PayloadError, match="UserSetEvent"):
        decode_payload(_batch([1]), user_sets=True)
    with pytest.raises(PayloadError, match="EventBatch or Event"):
        decode_payload(user, user_sets=False)


def test_count_epochs_split_batches_at_boundaries() -> None:
    policy, progress = CountEpochs(4), ShardProgress()
    payload = EventPayload(np.arange(10), np.zeros(10, dtype=np.int64))
    split = policy.split(payload, progress)
    assert [(e, p.items.tolist()) for e, p in split.pieces] == [
        (0, [0, 1, 2, 3]),
        (1, [4, 5, 6, 7]),
        (2, [8, 9]),
    ]
    assert policy.closable_through(progress) == 1
    with pytest.raises(ValueError, match="epoch_events"):
        CountEpochs(0)


def test_time_epochs_close_on_punctuation_never_on_event_times() -> None:
    policy = TimeEpochs(10, lateness_ms=5)
    sketcher = ShardSketcher(0, SketchSpec("mg", 8), policy, {}, ShardProgress())
    out, late = sketcher.add(EventPayload(np.array([9]), np.array([30])))
    assert (out, late) == ([], 1) and "first EpochWatermark" in sketcher.late_reason  # no epoch started
    out, _ = sketcher.add(WatermarkPayload("clock", 5))  # first punctuation: epochs start at 0
    assert out == [ShardSketch(0, None, None, -1)] and sketcher.progress.first_epoch == 0
    out, late = sketcher.add(EventPayload(np.array([1, 2, 3]), np.array([0, 12, 16])))
    assert (out, late) == ([], 0)  # event times (up to 16) close nothing
    out, _ = sketcher.add(WatermarkPayload("clock", 16))  # 16 - lateness 5 = 11 passed epoch 0's end
    assert [(s.epoch, load_sketch(s.data).counters()) for s in out] == [(0, {1: 1})]
    sketcher.add(WatermarkPayload("clock", 3))  # the clock never moves back
    assert sketcher.progress.watermark == 16
    out, late = sketcher.add(EventPayload(np.array([4, 5]), np.array([9, 25])))
    assert late == 1 and "closed by punctuation" in sketcher.late_reason  # epoch 0's event; 25 counts
    assert sketcher.add(WatermarkPayload("clock", 20)) == ([], 0)  # 20 - 5 has not passed epoch 1's end
    # the end of input closes through the last punctuation, lateness aside: epoch 1 ([10, 20))
    assert [(s.epoch, load_sketch(s.data).counters()) for s in sketcher.finish()[:-1]] == [(1, {2: 1, 3: 1})]
    assert sketcher.unreleased_events == 1  # epoch 2 (t=25) ends after the last punctuation
    with pytest.raises(ValueError, match="lateness"):
        TimeEpochs(10, -1)


def _events(item: int, n: int, t: int) -> EventPayload:
    return EventPayload(np.full(n, item, dtype=np.int64), np.full(n, t, dtype=np.int64))


def _run_shard(messages: list[Payload], policy: TimeEpochs) -> tuple[dict[int, dict[object, int]], int]:
    """Feed one shard; ``({epoch: counters of its closed sketch}, late events)`` after the end."""
    sketcher = ShardSketcher(0, SketchSpec("mg", 8), policy, {}, ShardProgress())
    closed: list[ShardSketch] = []
    late = 0
    for message in messages:
        out, n_late = sketcher.add(message)
        closed += out
        late += n_late
    closed += sketcher.finish()
    return {s.epoch: load_sketch(s.data).counters() for s in closed if s.data is not None}, late


def test_far_future_event_cannot_make_other_events_late() -> None:
    """The privacy review's example (HIGH): TimeEpochs(1000), 50 x item 7 @ t=10, then 50 x item 7
    @ t=20. Inserting ONE event (item 3 @ t=10000) between the batches used to advance the event-time
    watermark, close epoch 0 and drop the second batch (epoch 0 = {7: 50}). Epochs now close only on
    punctuation, so epoch 0 = {7: 100} both ways, the released epochs are the same, and the one event
    changes only its own epoch (10)."""
    policy = TimeEpochs(1000)
    first, second, far = _events(7, 50, 10), _events(7, 50, 20), _events(3, 1, 10_000)
    start, punct, straggler = WatermarkPayload("clock", 0), WatermarkPayload("clock", 1000), _events(7, 1, 30)
    end = WatermarkPayload("clock", 11_000)
    without, late_without = _run_shard([start, first, second, punct, straggler, end], policy)
    with_far, late_with = _run_shard([start, first, far, second, punct, straggler, end], policy)
    assert without[0] == with_far[0] == {7: 100}
    # an event of an epoch already closed by punctuation is late (dead-lettered), either way
    assert late_without == late_with == 1
    # add/remove one event changes exactly one epoch's sketch, by exactly that event
    assert set(without) == set(with_far) == set(range(11))
    changed = {e for e in without if without[e] != with_far[e]}
    assert changed == {10} and with_far[10] == {3: 1}


def test_released_epochs_depend_on_punctuation_only() -> None:
    """One event before the first punctuation, or after the last, adds no release (it is
    dead-lettered or left unreleased); the empty epochs between punctuations are released."""
    policy = TimeEpochs(1000)
    start, end = WatermarkPayload("clock", 2000), WatermarkPayload("clock", 5000)
    body = [start, _events(7, 5, 2500), end]
    base, _ = _run_shard(body, policy)
    assert base == {2: {7: 5}, 3: {}, 4: {}}
    early, late = _run_shard([_events(9, 1, 100), *body], policy)
    assert early == base and late == 1
    future, late = _run_shard([*body[:2], _events(9, 1, 10**9), end], policy)
    assert future == base and late == 0


@both_modes
def test_punctuation_before_any_event_closes_epochs_for_the_merge(mode: str) -> None:
    """A shard that has counted nothing still reports progress on punctuation (so the merge need not
    wait for it), and later events of the punctuated epochs are late regardless of earlier events."""
    policy = TimeEpochs(1000)
    sketcher = ShardSketcher(0, SketchSpec("mg", 8), policy, {}, ShardProgress())
    out, late = sketcher.add(WatermarkPayload("clock", 3000))
    assert out == [ShardSketch(0, None, None, 2)] and late == 0
    out, late = sketcher.add(EventPayload(np.array([1, 2]), np.array([500, 3500])))
    assert out == [] and late == 1  # epoch 0 is closed: only the event of epoch 3 counts
    out, _ = sketcher.add(WatermarkPayload("clock", 4000))
    assert [(s.epoch, load_sketch(s.data).counters()) for s in out] == [(3, {2: 1})]
    spec = SketchSpec("mg", 8, release_mode=mode)
    merger = EpochMerger(2, spec)
    assert merger.add(ShardSketch(1, None, None, 3)) == []  # shard 1: progress only, through epoch 3
    merged = merger.add(out[0])
    assert [(m.epoch, m.shards, epoch_counters(spec, m.data)) for m in merged] == [(3, 2, {2: 1})]


@both_modes
def test_merged_epochs_do_not_depend_on_which_shard_arrives_first(mode: str) -> None:
    """Shards whose first punctuations differ start at different epochs: the job's first epoch is
    the smallest shard start (punctuation only), whichever shard's messages reach the merge first;
    per shard, the epoch's bytes are the same too."""
    policy, spec = TimeEpochs(10), SketchSpec("mg", 8, release_mode=mode)
    a = ShardSketcher(0, spec, policy, {}, ShardProgress())
    b = ShardSketcher(1, spec, policy, {}, ShardProgress())
    from_a = (
        a.add(WatermarkPayload("clock", 60))[0] + a.add(_events(7, 2, 61))[0] + a.add(_events(8, 1, 75))[0]
    )
    from_a += a.add(WatermarkPayload("clock", 100))[0] + a.finish()
    from_b = b.add(WatermarkPayload("clock", 80))[0] + b.add(_events(9, 1, 85))[0]
    from_b += b.add(WatermarkPayload("clock", 100))[0] + b.finish()
    releases, data = [], []
    for order in (from_a + from_b, from_b + from_a):
        merger = EpochMerger(2, spec)
        merged = [m for msg in order for m in merger.add(msg)]
        releases.append([(m.epoch, epoch_counters(spec, m.data)) for m in merged])
        data.append([m.data for m in merged])
    assert releases[0] == releases[1] == [(6, {7: 2}), (7, {8: 1}), (8, {9: 1}), (9, {})]
    assert data[0] == data[1]


def test_count_epochs_ignore_punctuation() -> None:
    sketcher = ShardSketcher(0, SketchSpec("mg", 8), CountEpochs(4), {}, ShardProgress())
    assert sketcher.add(WatermarkPayload("clock", 10**12)) == ([], 0)
    out, late = sketcher.add(EventPayload(np.arange(5), np.zeros(5, dtype=np.int64)))
    assert late == 0 and [s.epoch for s in out] == [0]


def _core_epoch_sketches(batches: list[np.ndarray], size: int, k: int) -> list[MisraGries]:
    """What core computes for one shard: count epochs of ``size`` fed batch by batch."""
    sketches: list[MisraGries] = []
    seen = 0
    for batch in batches:
        start = 0
        while start < len(batch):
            epoch = (seen + start) // size
            stop = min(len(batch), (epoch + 1) * size - seen)
            while len(sketches) <= epoch:
                sketches.append(MisraGries(k))
            sketches[epoch].update_batch(batch[start:stop])
            start = stop
        seen += len(batch)
    return sketches


def _run_count_epoch_shards(spec: SketchSpec, seed: int = 3) -> tuple[list, dict[int, list[MisraGries]]]:
    """Three shards' zipf batches through ShardSketcher -> EpochMerger (count epochs of 700, the
    shards' messages interleaved); returns (merged epochs, core per-shard epoch sketches)."""
    rng = np.random.default_rng(seed)
    k, size = spec.k, 700
    policy = CountEpochs(size)
    shards = {s: [rng.zipf(1.3, 250) % 50 for _ in range(4 + 4 * s)] for s in range(3)}  # 2, 3, 5 epochs
    merger = EpochMerger(3, spec)
    merged = []
    # interleave the shards' messages: the merge must not depend on arrival order
    sketchers = {s: ShardSketcher(s, spec, policy, {}, ShardProgress()) for s in shards}
    for i in range(max(len(b) for b in shards.values())):
        for s in (2, 0, 1):
            if i < len(shards[s]):
                out, late = sketchers[s].add(EventPayload(shards[s][i], np.zeros(250, dtype=np.int64)))
                assert late == 0
                for msg in out:
                    merged += merger.add(msg)
    for s in (1, 2, 0):
        for msg in sketchers[s].finish():
            merged += merger.add(msg)
    return merged, {s: _core_epoch_sketches(b, size, k) for s, b in shards.items()}


def test_shard_sketcher_and_merger_equal_core_fixed_order_merge() -> None:
    spec = SketchSpec("mg", 8, release_mode="merged")
    merged, core = _run_count_epoch_shards(spec)
    n_epochs = max(len(v) for v in core.values())
    assert [m.epoch for m in merged] == list(range(n_epochs))
    for m in merged:
        expected = merge_in_order([core[s][m.epoch] for s in sorted(core) if m.epoch < len(core[s])], k=8)
        got = load_sketch(m.data)
        assert got.build is Build.MERGED and m.shards == 3
        assert got.counters() == expected.counters() and got.n == expected.n


def test_per_shard_epochs_hold_every_shards_core_sketch_in_shard_order() -> None:
    """Per-shard release input: every shard's sequential Alg. 1 sketch of the epoch, in shard order,
    equal to core's (slots, counters, n) — an empty sketch for a shard whose stream ended earlier."""
    spec = SketchSpec("mg", 8)
    assert spec.per_shard and spec.release_mode == "per-shard"
    merged, core = _run_count_epoch_shards(spec)
    n_epochs = max(len(v) for v in core.values())
    assert [m.epoch for m in merged] == list(range(n_epochs))
    empties = 0
    for m in merged:
        got = spec.load_release_input(m.data)
        assert isinstance(got, list) and len(got) == m.shards == 3
        for s, sketch in enumerate(got):
            expected = core[s][m.epoch] if m.epoch < len(core[s]) else MisraGries(8)
            empties += expected.n == 0
            assert sketch.build is Build.ALG1_SEQUENTIAL and sketch.k == 8
            assert sketch.slots() == expected.slots() and sketch.n == expected.n
    assert empties > 0  # the shards' streams end in different epochs: empty shard sketches occur


def test_merger_waits_for_every_shard_and_fills_missing_with_empty() -> None:
    spec = SketchSpec("mg", 4, release_mode="merged")
    merger = EpochMerger(2, spec)
    one = MisraGries(4)
    one.update_batch(np.array([1, 1, 2]))
    assert merger.add(ShardSketch(0, 0, one.to_bytes(), 0)) == []  # shard 1 has not closed epoch 0
    out = merger.add(ShardSketch(1, None, None, FINAL))  # shard 1 ended without data: epoch 0 complete
    assert [m.epoch for m in out] == [0] and load_sketch(out[0].data).counters() == {1: 2, 2: 1}
    assert out[0].shards == 2
    assert merger.add(ShardSketch(0, None, None, FINAL)) == []  # nothing further was pending
    with pytest.raises(ValueError, match="shards"):
        merger.add(ShardSketch(5, 0, one.to_bytes(), 0))


def test_per_shard_merger_waits_for_every_shard_and_fills_missing_with_empty() -> None:
    """Per shard, a shard that sent no sketch for the epoch contributes an empty Alg. 1 sketch in its
    place (its release is pure noise below the threshold), so the input always has every shard."""
    from privstream.operators.state_records import unpack_shard_sketches

    spec = SketchSpec("mg", 4)
    merger = EpochMerger(3, spec)
    one = MisraGries(4)
    one.update_batch(np.array([1, 1, 2]))
    assert merger.add(ShardSketch(1, 0, one.to_bytes(), 0)) == []
    assert merger.add(ShardSketch(0, None, None, FINAL)) == []  # shard 2 has not closed epoch 0
    out = merger.add(ShardSketch(2, None, None, FINAL))
    assert [(m.epoch, m.shards, m.refused) for m in out] == [(0, 3, None)]
    parts = unpack_shard_sketches(out[0].data)
    assert parts == [spec.new().to_bytes(), one.to_bytes(), spec.new().to_bytes()]
    loaded = spec.load_release_input(out[0].data)
    assert [s.counters() for s in loaded] == [{}, {1: 2, 2: 1}, {}]
    assert merger.add(ShardSketch(1, None, None, FINAL)) == []


def test_pamg_shards_merge_like_core_and_oversized_sets_are_rejected() -> None:
    from privstream.sketches import PrivacyAwareMisraGries, merge_in_order

    spec, policy = SketchSpec("pamg", 6, 2), CountEpochs(50)
    users = {s: [(s * 1000 + u, (u % 7, (u * 3) % 11 + 20)) for u in range(60)] for s in range(2)}
    merger, merged = EpochMerger(2, spec), []
    for s, sets in users.items():
        sk = ShardSketcher(s, spec, policy, {}, ShardProgress())
        for uid, items in sets:
            out, _ = sk.add(UserSetPayload(uid, items, 0))
            for msg in out:
                merged += merger.add(msg)
        for msg in sk.finish():
            merged += merger.add(msg)
    assert [m.epoch for m in merged] == [0, 1]
    for m in merged:
        shards = []
        for s in sorted(users):
            core = PrivacyAwareMisraGries(6, 2)
            for _, items in users[s][m.epoch * 50 : (m.epoch + 1) * 50]:
                core.update(items)
            shards.append(core)
        got = load_sketch(m.data)
        assert got.build is Build.PAMG_MERGED and got.counters() == merge_in_order(shards).counters()
    with pytest.raises(ValueError):
        ShardSketcher(0, spec, policy, {}, ShardProgress()).add(UserSetPayload(1, (1, 2, 3), 0))
    with pytest.raises(ValueError, match="m:"):
        SketchSpec("pamg", 4, 4)


@both_modes
def test_a_misrouted_event_stops_every_later_release_fail_closed(mode: str) -> None:
    """One misrouted message (a position-based producer) must not just be dropped — which of the
    right-routed events are counted would then depend on position — the job stops releasing: every
    epoch closed after it is merged as refused, and the releaser publishes nothing and charges nothing."""
    from privstream.connectors.avro_codec import decode
    from privstream.operators.release_logic import EpochReleaser, ReleaseConfig
    from privstream.operators.shard_logic import Misrouted

    from privstream.accounting import PrivacyLedger
    from privstream.partitioning import partition_for

    spec, policy, shards = SketchSpec("mg", 8, release_mode=mode), TimeEpochs(1000), 2
    own = [x for x in range(200) if partition_for(np.asarray([x]), shards)[0] == 0][:5]
    other = next(x for x in range(200) if partition_for(np.asarray([x]), shards)[0] == 1)
    progress, store = ShardProgress(), {}
    sketcher = ShardSketcher(0, spec, policy, store, progress, shards)
    merger = EpochMerger(shards, spec)
    closed = sketcher.add(WatermarkPayload("clock", 0))[0]
    closed += sketcher.add(EventPayload(np.asarray(own), np.full(5, 10, dtype=np.int64)))[0]
    closed += sketcher.add(WatermarkPayload("clock", 1000))[0]  # epoch 0 closes before the fault
    merged = []
    for shard_msg in [*closed, ShardSketch(1, None, None, 0)]:  # shard 1 closed epoch 0 too
        merged += merger.add(shard_msg)
    closed = []
    with pytest.raises(Misrouted):
        sketcher.add(EventPayload(np.asarray([own[0], other]), np.full(2, 1500, dtype=np.int64)))
    assert progress.misrouted is not None and "partition 0" in progress.misrouted
    restored = ShardProgress.from_bytes(progress.to_bytes())  # the refusal survives a restore
    assert restored.misrouted == progress.misrouted
    closed += sketcher.add(WatermarkPayload("clock", 3000))[0]
    assert [s.refused is not None for s in closed if s.epoch is not None] == [True, True]
    for shard_msg in [*closed, ShardSketch(1, None, None, 5)]:
        merged += merger.add(shard_msg)
    assert [(m.epoch, m.refused is None) for m in merged] == [(0, True), (1, False), (2, False)]
    config = ReleaseConfig(1.0, 1e-6, 10.0, 1e-5, "test/fail-closed")
    releaser = EpochReleaser(config, spec, policy, hooks=TestHooks(noise_seed=1))
    first, _ = releaser.release(merged[0])
    refused, entry = releaser.release(merged[1])
    assert first is not None and refused is None
    assert decode(first)[1]["mechanism"] == ("pmg" if mode == "per-shard" else "gshm")
    assert releaser.ledger.sequence == 1  # the refused epoch charged nothing
    assert entry is None  # nothing charged, so no ledger entry; the error is in the log
    assert isinstance(releaser.ledger, PrivacyLedger)


@both_modes
def test_a_misrouted_event_also_refuses_epochs_the_merge_still_holds(mode: str) -> None:
    """Epoch 0 is closed by shard 0 but waits for shard 1 when shard 0 sees a misrouted event: the
    refusal travels at once (``Misrouted.messages``), so epoch 0 is refused when shard 1 completes it."""
    from privstream.operators.shard_logic import Misrouted

    from privstream.partitioning import partition_for

    spec, policy, shards = SketchSpec("mg", 8, release_mode=mode), TimeEpochs(1000), 2
    own = next(x for x in range(200) if partition_for(np.asarray([x]), shards)[0] == 0)
    other = next(x for x in range(200) if partition_for(np.asarray([x]), shards)[0] == 1)
    sketcher = ShardSketcher(0, spec, policy, {}, ShardProgress(), shards)
    merger = EpochMerger(shards, spec)
    merged = []
    for msg in (
        sketcher.add(WatermarkPayload("clock", 0))[0] + sketcher.add(WatermarkPayload("clock", 1000))[0]
    ):
        merged += merger.add(msg)
    merged += merger.add(ShardSketch(1, None, None, -1))  # shard 1 has started, closed nothing yet
    assert merged == []
    with pytest.raises(Misrouted) as caught:
        sketcher.add(EventPayload(np.asarray([own, other]), np.full(2, 1500, dtype=np.int64)))
    assert [m.refused is not None for m in caught.value.messages] == [True]
    for msg in caught.value.messages:
        merged += merger.add(msg)
    merged += merger.add(ShardSketch(1, 0, spec.new().to_bytes(), 0))
    assert [(m.epoch, m.refused is not None) for m in merged] == [(0, True)]


def test_a_rejected_user_set_takes_no_count_epoch_position() -> None:
    """The operator dead-letters a set larger than m without saving progress; the Flink-free logic
    must agree (reject before the set takes a position), or later count epochs would shift."""
    sketcher = ShardSketcher(0, SketchSpec("pamg", 8, 2), CountEpochs(2), {}, ShardProgress())
    with pytest.raises(ValueError, match="m"):
        sketcher.add(UserSetPayload(1, (1, 2, 3), 0))
    assert sketcher.progress.seen == 0
    sketcher.add(UserSetPayload(2, (1, 2), 0))
    assert sketcher.progress.seen == 1


def test_sketch_spec_takes_everything_about_its_kind_from_the_kind_registry() -> None:
    """Each sketch family is one registered ``ShardSketchKind``; ``SketchSpec`` looks it up by name."""
    from privstream.operators.sketch_spec import get_kind, kind_for, kind_names

    assert kind_names()[:2] == ("mg", "pamg")
    assert kind_for(user_level=False).name == "mg" and kind_for(user_level=True).name == "pamg"
    with pytest.raises(ValueError, match="^sketch: expected one of"):
        get_kind("space_saving")
    mg, pamg = SketchSpec("mg", 8), SketchSpec("pamg", 8, 2)
    assert (mg.sketch_kind, pamg.sketch_kind) == (get_kind("mg"), get_kind("pamg"))
    assert (mg.shard_key, pamg.shard_key) == ("item", "user")
    with pytest.raises(TypeError, match="cannot update a MG sketch with UserSetPayload"):
        mg.update(mg.new(), UserSetPayload(1, (1, 2), 0))
    with pytest.raises(TypeError, match="cannot update a PAMG sketch with EventPayload"):
        pamg.update(pamg.new(), EventPayload([1], np.zeros(1, dtype=np.int64)))


@both_modes
def test_release_function_exposes_the_pre_noise_sketches_of_its_mode(mode: str) -> None:
    """TESTS/AUDIT ONLY side output: per shard, one ``SketchSnapshot`` per shard (``shard`` = its
    index, its own bytes, an empty sketch for a shard that sent none); merged, the one merged sketch
    (``shard`` = -1). Built without a Flink runtime (``_snapshots`` is plain logic)."""
    from privstream.connectors.avro_codec import decode
    from privstream.operators.release_logic import ReleaseConfig
    from privstream.operators.release_operator import ReleaseFunction

    spec = SketchSpec("mg", 4, release_mode=mode)
    config = ReleaseConfig(1.0, 1e-6, 2.0, 2e-6, "hh/snapshots")
    hooks = TestHooks(noise_seed=1, expose_sketches_topic="hh-snapshots")
    function = ReleaseFunction(config, spec, TimeEpochs(1000), hooks=hooks)
    assert function.expose_sketches
    one = MisraGries(4)
    one.update_batch(np.array([1, 1, 2, 9]))
    merged = EpochMerger(3, spec)
    assert merged.add(ShardSketch(0, 5, one.to_bytes(), 5)) == []
    assert merged.add(ShardSketch(1, None, None, FINAL)) == []
    (epoch,) = merged.add(ShardSketch(2, None, None, FINAL))
    records = [decode(data) for data in function._snapshots(epoch)]
    assert {name for name, _ in records} == {"SketchSnapshot"}
    got = [(r["shard"], r["build"], r["sketch_type"], r["epoch"], r["n"], r["data"]) for _, r in records]
    if mode == "per-shard":
        empty = MisraGries(4).to_bytes()
        assert got == [
            (0, "ALG1_SEQUENTIAL", "MisraGries", 5, 4, one.to_bytes()),
            (1, "ALG1_SEQUENTIAL", "MisraGries", 5, 0, empty),
            (2, "ALG1_SEQUENTIAL", "MisraGries", 5, 0, empty),
        ]
    else:
        assert got == [(-1, "MERGED", "StandardMisraGries", 5, 4, epoch.data)]
