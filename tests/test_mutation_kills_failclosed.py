"""The jobs' fail-closed chain and epoch bookkeeping, stated from their definitions.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py failclosed``). The
heavy-hitters guarantee (Lebeda–Tětek Cor. 7.2: one event in one shard, shards combined in a fixed,
data-independent order) holds only while every shard's partition is a hash of the event
(operators/routing.py); the jobs therefore fail closed. What each test checks, against values
written down from the definitions (never produced by re-running the code under test):

* ``ShardSketcher``: a misrouted message sets the shard's refusal for good and raises
  :class:`Misrouted` carrying a progress message only once the shard has closed something; every
  message the shard emits afterwards carries the refusal — the progress-only message of a first
  punctuation that closes nothing and the ``FINAL`` marker of :meth:`finish` too — so the merge
  refuses epochs other shards complete with it. A user-keyed MG shard checks the *user* hash.
  ``finish`` counts every event of the epochs beyond the last punctuation and marks the shard
  final (a later punctuation re-emits nothing); a closed epoch leaves the dirty set.
* ``EpochMerger``: the shard count is validated; a shard id equal to the count is refused; a
  shard's progress never moves back; an epoch a shard closed without a sketch counts as that
  shard's empty sketch; the first refusal stays in the merge state (also through a checkpoint) and
  reaches every epoch completed afterwards; a job whose shards all ended without any epoch releases
  nothing and has no first epoch.
* ``EpochReleaser.decide``: the public bound ``n_bound`` passed to the release entry point is the
  count-epoch size, times m for PAMG (items per user set), times the shard count for the merged
  path (None for time epochs); ``keys_disjoint`` is "the shards hash the item"; the ledger label is
  ``heavy-hitters``; a budget refusal logs the ledger's reason.
* ``WindowShardLogic`` (DPSW, Wang–Wang–Chen Alg. 2): a restored refusal keeps refusing every
  message; event-time dead letters carry the original bytes and the full reason; an event exactly
  at the clock is late (the punctuation M says every time <= M − 1 has arrived); non-integer
  items are counted like the core sketch counts them.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.operators.epochs import FINAL, CountEpochs, ShardProgress, TimeEpochs
from privstream.operators.payloads import EventPayload, WatermarkPayload
from privstream.operators.release_logic import EpochReleaser, ReleaseConfig
from privstream.operators.shard_logic import (
    EpochMerger,
    EpochReleaseInput,
    MergeState,
    Misrouted,
    ShardSketch,
    ShardSketcher,
)
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.test_hooks import TestHooks
from privstream.operators.window_logic import LedgerCharge, WindowSettings, WindowShardLogic

from privstream.partitioning import partition_for
from privstream.sketches import MisraGries, load_sketch
from privstream.window import DPSWSketch

SHARDS = 2
TOPIC = "events"


def _home(key: object) -> int:
    return int(partition_for(np.asarray([key]), SHARDS)[0])


OWN = [x for x in range(400) if _home(x) == 0][:6]  #: items the partitioner puts in shard 0
OTHER = [x for x in range(400) if _home(x) == 1][:6]  #: items it puts in shard 1

both_modes = pytest.mark.parametrize("mode", ["per-shard", "merged"])


def _events(items: list[int], t: int, users: tuple[object, ...] = ()) -> EventPayload:
    return EventPayload(np.asarray(items, dtype=np.int64), np.full(len(items), t, dtype=np.int64), users)


def _tick(ms: int) -> WatermarkPayload:
    return WatermarkPayload("clock", ms)


def _sketch(items: list[int], k: int = 8) -> bytes:
    sketch = MisraGries(k)
    sketch.update_batch(np.asarray(items, dtype=np.int64))
    return sketch.to_bytes()


def _merge(merger: EpochMerger, messages: list[ShardSketch]) -> list[EpochReleaseInput]:
    return [out for msg in messages for out in merger.add(msg)]


def _misroute(sketcher: ShardSketcher, t: int) -> list[ShardSketch]:
    """Feed shard 0 a message with one event of shard 1; the refusal messages it raises with."""
    with pytest.raises(Misrouted) as caught:
        sketcher.add(_events([OWN[0], OTHER[0]], t))
    return caught.value.messages


# ---------------------------------------------------------------------------------------------------
# ShardSketcher: the refusal travels with every later message
# ---------------------------------------------------------------------------------------------------


@both_modes
def test_a_refusal_before_the_first_punctuation_reaches_epochs_other_shards_complete(mode: str) -> None:
    """Shard 0 sees a misrouted message before its first punctuation (nothing closed: no refusal
    message yet). Its first punctuation (1000 ms) closes nothing of its own (its epochs start at 1)
    and only reports progress through epoch 0 — that progress message must carry the refusal, so
    epoch 0, completed by shard 1, is refused."""
    spec, policy = SketchSpec("mg", 8, release_mode=mode), TimeEpochs(1000)
    zero = ShardSketcher(0, spec, policy, {}, ShardProgress(), SHARDS)
    one = ShardSketcher(1, spec, policy, {}, ShardProgress(), SHARDS)
    assert _misroute(zero, 10) == []  # nothing closed yet: nothing to refuse at once
    reason = zero.progress.misrouted
    assert reason is not None and reason.startswith("partition 0: misrouted")
    progress = zero.add(_tick(1000))[0]
    assert progress == [ShardSketch(0, None, None, 0, reason)]
    from_one = one.add(_tick(0))[0] + one.add(_events(OTHER[:2], 20))[0] + one.add(_tick(1000))[0]
    merged = _merge(EpochMerger(SHARDS, spec), [from_one[0], *progress, *from_one[1:]])
    assert [(m.epoch, m.refused) for m in merged] == [(0, reason)]


@both_modes
def test_the_final_marker_of_a_refusing_shard_refuses_what_it_completes(mode: str) -> None:
    """A shard whose only message was misrouted ends (no punctuation: no epoch of its own). Its
    FINAL marker completes shard 1's epochs 0 and 1 and must carry the refusal."""
    spec, policy = SketchSpec("mg", 8, release_mode=mode), TimeEpochs(1000)
    zero = ShardSketcher(0, spec, policy, {}, ShardProgress(), SHARDS)
    one = ShardSketcher(1, spec, policy, {}, ShardProgress(), SHARDS)
    assert _misroute(zero, 10) == []
    reason = zero.progress.misrouted
    from_one = one.add(_tick(0))[0] + one.add(_events(OTHER[:1], 5))[0] + one.add(_tick(2000))[0]
    ended = zero.finish()
    assert ended == [ShardSketch(0, None, None, FINAL, reason)]
    merger = EpochMerger(SHARDS, spec)
    assert _merge(merger, from_one) == []  # waits for shard 0's first message
    assert [(m.epoch, m.refused) for m in _merge(merger, ended)] == [(0, reason), (1, reason)]


def test_refusal_is_empty_until_the_shard_has_closed_an_epoch_and_for_a_healthy_shard() -> None:
    """``refusal()`` (the docstring): a progress message carrying the refusal, empty while the
    shard has closed nothing; a shard that saw no misrouted event has nothing to refuse."""
    spec, policy = SketchSpec("mg", 8), CountEpochs(2)
    healthy = ShardSketcher(0, spec, policy, {}, ShardProgress(), SHARDS)
    assert healthy.refusal() == []
    closed = healthy.add(_events(OWN[:3], 0))[0]
    assert [s.epoch for s in closed] == [0] and healthy.refusal() == []  # closed, but not refusing
    fresh = ShardSketcher(0, spec, policy, {}, ShardProgress(), SHARDS)
    assert _misroute(fresh, 0) == [] and fresh.refusal() == []  # refusing, nothing closed yet
    reason = fresh.progress.misrouted
    assert _misroute(healthy, 0) == [ShardSketch(0, None, None, 0, healthy.progress.misrouted)]
    assert reason is not None and healthy.progress.misrouted is not None


def test_a_user_keyed_event_shard_checks_the_user_hash_not_the_item_hash() -> None:
    """``--shard-key user`` on an MG job: the partition is a hash of the user. An event whose item
    hashes here but whose user hashes to the other shard is misrouted; the converse is not."""
    spec = SketchSpec("mg", 8, shard_key="user")
    users_here = [u for u in range(1000, 1400) if _home(u) == 0][:2]
    users_there = [u for u in range(1000, 1400) if _home(u) == 1][:2]
    sketcher = ShardSketcher(0, spec, CountEpochs(10), {}, ShardProgress(), SHARDS)
    sketcher.add(_events([OTHER[0], OTHER[1]], 0, tuple(users_here)))  # items elsewhere, users here
    assert sketcher.progress.misrouted is None and sketcher.progress.seen == 2
    with pytest.raises(Misrouted):
        sketcher.add(_events([OWN[0], OWN[1]], 0, (users_here[0], users_there[0])))
    assert "1 of 2 event(s) hash (by user)" in (sketcher.progress.misrouted or "")
    assert sketcher.progress.seen == 2  # nothing of the misrouted message was counted


# ---------------------------------------------------------------------------------------------------
# ShardSketcher: finish, dirty set
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("live", [None, {}], ids=["store", "live"])
def test_finish_counts_every_unreleased_event_and_marks_the_shard_final(live: dict | None) -> None:
    """Time epochs of 1 s, punctuations 0 and 1000: epoch 0 is released; 2 events of epoch 1 and 3
    of epoch 2 lie after the last punctuation: 5 unreleased events. The shard is then final: a
    later punctuation closes (and re-emits) nothing."""
    spec = SketchSpec("mg", 8)
    progress = ShardProgress()
    sketcher = ShardSketcher(0, spec, TimeEpochs(1000), {}, progress, 1, live=live)
    sketcher.add(_tick(0))
    sketcher.add(_events([1], 100))
    sketcher.add(_events([2, 3], 1500))
    sketcher.add(_events([4, 5, 6], 2500))
    [epoch0] = sketcher.add(_tick(1000))[0]
    assert epoch0.epoch == 0 and load_sketch(epoch0.data).counters() == {1: 1}
    assert sketcher.finish() == [ShardSketch(0, None, None, FINAL, None)]
    assert sketcher.unreleased_events == 2 + 3
    assert progress.closed_through == FINAL
    assert ShardProgress.from_bytes(progress.to_bytes()).closed_through == FINAL  # what is checkpointed
    assert sketcher.add(_tick(5000)) == ([], 0)


def test_a_closed_epoch_leaves_the_dirty_set() -> None:
    """``dirty``: the epochs whose live sketch changed since the last flush. Closing epoch 0 takes
    its sketch away (emitted), so only epoch 1 is dirty, and a flush writes epoch 1 only."""
    spec, store = SketchSpec("mg", 8), {}
    sketcher = ShardSketcher(0, spec, TimeEpochs(1000), store, ShardProgress(), 1, live={})
    sketcher.add(_tick(0))
    sketcher.add(_events([7, 7], 500))
    sketcher.add(_events([9], 1500))
    assert sketcher.dirty == {0, 1}
    [closed] = sketcher.add(_tick(1000))[0]
    assert closed.epoch == 0 and load_sketch(closed.data).counters() == {7: 2}
    assert sketcher.dirty == {1}
    sketcher.flush()
    assert list(store) == [1] and load_sketch(store[1]).counters() == {9: 1} and sketcher.dirty == set()


# ---------------------------------------------------------------------------------------------------
# EpochMerger
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True, None])
def test_the_merger_refuses_a_bad_shard_count_with_a_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^shards: must be an int >= 1"):
        EpochMerger(bad, SketchSpec("mg", 8))  # type: ignore[arg-type]


@pytest.mark.parametrize("shard", [-1, SHARDS, SHARDS + 3])
def test_the_merger_refuses_a_shard_id_outside_0_to_count_minus_one(shard: int) -> None:
    merger = EpochMerger(SHARDS, SketchSpec("mg", 8))
    with pytest.raises(ValueError, match=f"^shards: got a sketch from shard {shard}, but the job has 2"):
        merger.add(ShardSketch(shard, None, None, 0))
    assert merger.state.closed == (None, None)


def test_a_shards_progress_never_moves_back() -> None:
    """Shard 0 closed epochs 0..2; a stale progress message (through 0) arrives later. Shard 1
    started at epoch 3 (its first punctuation closed through 2). Epochs 0..2 are complete."""
    spec = SketchSpec("mg", 8)
    merger = EpochMerger(SHARDS, spec)
    data = [_sketch([OWN[e]] * (e + 1)) for e in range(3)]
    shard0 = [ShardSketch(0, e, data[e], e) for e in range(3)]
    merged = _merge(merger, [*shard0, ShardSketch(0, None, None, 0), ShardSketch(1, None, None, 2)])
    assert [m.epoch for m in merged] == [0, 1, 2]
    assert merger.state.closed == (2, 2)
    for m in merged:
        parts = spec.load_release_input(m.data)
        assert [p.counters() for p in parts] == [{OWN[m.epoch]: m.epoch + 1}, {}]


@both_modes
def test_an_epoch_closed_without_a_sketch_counts_as_an_empty_sketch(mode: str) -> None:
    """The module docstring: a shard that closed epoch e without sending a sketch for it contributed
    nothing. Progress-only messages over epochs 0 and 1 from both shards, and a message naming epoch
    2 without data: the release inputs are those of empty shard sketches."""
    spec = SketchSpec("mg", 8, release_mode=mode)
    empty = spec.new().to_bytes()
    merger = EpochMerger(SHARDS, spec)
    start = [ShardSketch(0, None, None, -1), ShardSketch(1, None, None, -1)]
    merged = _merge(merger, [*start, ShardSketch(0, None, None, 1), ShardSketch(1, None, None, 1)])
    reference = EpochMerger(SHARDS, spec)
    explicit = _merge(reference, [ShardSketch(s, e, empty, e) for e in (0, 1) for s in range(SHARDS)])
    assert [(m.epoch, m.shards, m.refused) for m in merged] == [(0, 2, None), (1, 2, None)]
    assert [m.data for m in merged] == [m.data for m in explicit]
    one = _sketch([OTHER[0], OTHER[0], OTHER[1]])
    (epoch2,) = _merge(merger, [ShardSketch(0, 2, None, 2), ShardSketch(1, 2, one, 2)])
    assert epoch2.epoch == 2 and epoch2.refused is None
    loaded = spec.load_release_input(epoch2.data)
    if mode == "per-shard":
        assert [p.counters() for p in loaded] == [{}, {OTHER[0]: 2, OTHER[1]: 1}]
        assert [p.n for p in loaded] == [0, 3]
    else:
        assert loaded.counters() == {OTHER[0]: 2, OTHER[1]: 1} and loaded.n == 3
    for m in merged:
        loaded = spec.load_release_input(m.data)
        sketches = loaded if mode == "per-shard" else [loaded]
        assert all(s.counters() == {} and s.n == 0 for s in sketches)


def test_the_first_refusal_stays_with_the_merge_also_across_a_checkpoint() -> None:
    """Shard 0 refuses ("r1") after closing epoch 0; shard 1 never refuses. Every epoch completed
    afterwards is refused with r1 — also when the completing message is shard 1's unrefused one,
    after a later different reason ("r2"), and after a restore from the checkpointed state."""
    spec = SketchSpec("mg", 8)
    e = spec.new().to_bytes()
    merger = EpochMerger(SHARDS, spec)
    shard0 = [ShardSketch(0, 0, e, 0), ShardSketch(0, None, None, 0, "r1"), ShardSketch(0, 1, e, 1, "r1")]
    assert _merge(merger, shard0) == []
    assert [(m.epoch, m.refused) for m in merger.add(ShardSketch(1, 0, e, 0))] == [(0, "r1")]
    assert [(m.epoch, m.refused) for m in merger.add(ShardSketch(1, 1, e, 1))] == [(1, "r1")]
    assert merger.state.refused == "r1"
    later = _merge(merger, [ShardSketch(1, 2, e, 2, "r2"), ShardSketch(0, 2, e, 2, "r1")])
    assert [(m.epoch, m.refused) for m in later] == [(2, "r1")] and merger.state.refused == "r1"
    restored = EpochMerger(SHARDS, spec, MergeState.from_bytes(merger.state.to_bytes()))
    after = _merge(restored, [ShardSketch(1, 3, e, 3), ShardSketch(0, 3, e, 3)])
    assert [(m.epoch, m.refused) for m in after] == [(3, "r1")]


def test_shards_that_all_end_without_an_epoch_release_nothing() -> None:
    """Every shard's first message is its FINAL marker (no punctuation, no event): the job has no
    first epoch and releases nothing."""
    merger = EpochMerger(SHARDS, SketchSpec("mg", 8))
    assert merger.add(ShardSketch(1, None, None, FINAL)) == []
    assert merger.add(ShardSketch(0, None, None, FINAL)) == []
    assert merger.state.starts == (FINAL, FINAL) and merger.state.next_epoch is None
    assert MergeState.from_bytes(merger.state.to_bytes()).next_epoch is None


# ---------------------------------------------------------------------------------------------------
# EpochReleaser.decide: the parameters of the release entry point
# ---------------------------------------------------------------------------------------------------

# (spec, policy, shards, entry point, n_bound = epoch size x m (PAMG) x shards (merged), keys_disjoint)
RELEASE_CASES = [
    (SketchSpec("mg", 8), CountEpochs(50), 2, "release_disjoint", 50, True),
    (SketchSpec("mg", 8, shard_key="user"), CountEpochs(50), 2, "release_disjoint", 50, False),
    (SketchSpec("mg", 8), TimeEpochs(1000), 2, "release_disjoint", None, True),
    (SketchSpec("mg", 8, release_mode="merged"), CountEpochs(50), 3, "release", 150, None),
    (SketchSpec("mg", 8, release_mode="merged"), TimeEpochs(1000), 3, "release", None, None),
    (SketchSpec("pamg", 8, 3), CountEpochs(50), 2, "release", 50 * 3 * 2, None),
    (SketchSpec("pamg", 8, 3), TimeEpochs(1000), 2, "release", None, None),
    (SketchSpec("pamg", 8, 3, release_mode="per-shard"), CountEpochs(50), 2, "release_disjoint", 150, False),
]


@pytest.mark.parametrize(
    ("spec", "policy", "shards", "entry", "n_bound", "keys_disjoint"),
    RELEASE_CASES,
    ids=["mg-count", "mg-user-count", "mg-time", "merged-count", "merged-time", "pamg-count", "pamg-time",
         "pamg-per-shard-count"],
)  # fmt: skip
def test_decide_passes_the_public_bounds_and_label_to_the_release_entry_point(
    monkeypatch: pytest.MonkeyPatch,
    spec: SketchSpec,
    policy: Any,
    shards: int,
    entry: str,
    n_bound: int | None,
    keys_disjoint: bool | None,
) -> None:
    import privstream.mechanisms as mechanisms

    calls: list[tuple[str, dict[str, Any]]] = []
    for name in ("release", "release_disjoint"):
        real = getattr(mechanisms, name)

        def spy(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            calls.append((_name, kwargs))
            return _real(*args, **kwargs)

        monkeypatch.setattr(mechanisms, name, spy)
    data = spec.combine({0: spec.new().to_bytes()}, shards)
    config = ReleaseConfig(1.0, 1e-6, 10.0, 1e-5, f"hh/failclosed/{uuid.uuid4()}")
    releaser = EpochReleaser(config, spec, policy, hooks=TestHooks(noise_seed=2))
    outcome, entry_bytes = releaser.decide(EpochReleaseInput(4, data, shards))
    assert outcome is not None and entry_bytes is not None
    [(called, kwargs)] = calls
    assert called == entry and kwargs["n_bound"] == n_bound
    assert kwargs["label"] == "heavy-hitters" and kwargs["epoch"] == 4
    assert kwargs["group_size"] == (2 if isinstance(policy, CountEpochs) else 1)
    if keys_disjoint is not None:
        assert kwargs["keys_disjoint"] is keys_disjoint
    assert releaser.ledger.head is not None and releaser.ledger.head.label == "heavy-hitters"


def test_a_budget_refusal_logs_the_ledgers_reason(caplog: pytest.LogCaptureFixture) -> None:
    """Total budget = one release: the second charge of epoch 0 is refused; the first such refusal
    of a ledger is logged as an error with the ledger's own reason (what it would spend)."""
    spec = SketchSpec("mg", 8)
    ledger_id = f"hh/failclosed-budget/{uuid.uuid4()}"
    releaser = EpochReleaser(
        ReleaseConfig(1.0, 1e-6, 1.0, 1e-6, ledger_id), spec, CountEpochs(10), hooks=TestHooks(noise_seed=1)
    )
    data = spec.combine({}, SHARDS)
    first, _ = releaser.decide(EpochReleaseInput(0, data, SHARDS))
    assert first is not None and first.mechanism == "pmg"
    with caplog.at_level(logging.ERROR, logger="privstream.operators.release_logic"):
        refusal, entry = releaser.decide(EpochReleaseInput(0, data, SHARDS))
    assert entry is None and refusal is not None and refusal.epsilon_spent == 1.0
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    message = record.getMessage()
    assert message.startswith(f"budget exhausted: ledger {ledger_id!r}")
    assert "would spend (2.0, 2e-06) > total" in message and not message.endswith("(None)")


# ---------------------------------------------------------------------------------------------------
# WindowShardLogic
# ---------------------------------------------------------------------------------------------------

KEY = bytes(range(32))
TW = 100  #: event-time substream W (ms)


def _window_settings(**overrides: object) -> WindowSettings:
    base: dict[str, object] = dict(
        window=400, substream=TW, depth=3, width=64, epsilon=1.0, delta=1e-6, domain_size=60,
        gamma=0.1, shards=SHARDS, checkpoints=(TW, 8, 1), budget_ratio=0.5, queries=(0, 1),
        windowing="event-time", window_items=120, charge=LedgerCharge("sw/failclosed", 1, "abc"),
        submission_key=KEY,
    )  # fmt: skip
    base.update(overrides)
    return WindowSettings(**base)  # type: ignore[arg-type]


def _batch(pairs: list[tuple[object, int]]) -> bytes:
    events = [{"item": x, "user_id": None, "event_time": t} for x, t in pairs]
    return encode("EventBatch", {"events": events})


def _watermark(ms: int) -> bytes:
    return encode("EpochWatermark", {"producer_id": "clock", "watermark_ms": ms})


def _letter(output: tuple[str, bytes]) -> dict[str, Any]:
    kind, data = output
    assert kind == "dead-letter"
    name, record = decode(data)
    assert name == "DeadLetter"
    return record


@pytest.mark.parametrize("restored", [False, True], ids=["fresh-state", "restored-state"])
def test_a_restored_refusal_keeps_refusing_every_message(restored: bool) -> None:
    """The operator keeps ``refused`` in state and passes it back after a restore: every message —
    good events, a punctuation, junk — is dead-lettered with it, nothing is counted or released."""
    settings = _window_settings()
    state = binding = None
    if restored:
        before = WindowShardLogic(settings, 0)
        before.process(_batch([(OWN[0], 5)]), 0, TOPIC)
        state, binding = before.to_bytes(), settings.binding(0)
    logic = WindowShardLogic(settings, 0, state, refused="earlier misrouting", binding=binding)
    items_before = logic.sketch.items
    messages = [_batch([(OWN[1], 10), (OWN[2], 20)]), _watermark(TW), b"\x00junk"]
    for offset, value in enumerate(messages):
        [out] = logic.process(value, offset, TOPIC)
        letter = _letter(out)
        assert letter["error"] == "shard refuses releases: earlier misrouting"
        assert (letter["original_value"], letter["offset"], letter["partition"]) == (value, offset, 0)
    assert logic.sketch.items == items_before and logic.sketch.clock == -1


def test_event_time_dead_letters_carry_the_message_and_the_whole_reason() -> None:
    """Clock 99 after punctuation 100 (no event with time < 100 follows): an event AT 99 is late,
    one at 100 is counted, one beyond the horizon 199 is not. Each dead letter holds the original
    bytes; a punctuation the sketch refuses (beyond 2**62) is dead-lettered with its bytes too."""
    logic = WindowShardLogic(_window_settings(), 0)
    [(kind, _)] = logic.process(_watermark(TW), 0, TOPIC)
    assert kind == "release" and (logic.sketch.clock, logic.sketch.horizon) == (99, 199)
    message = _batch([(OWN[0], 99), (OWN[1], 100), (OWN[2], 200)])
    late, ahead = logic.process(message, 1, TOPIC)
    late, ahead = _letter(late), _letter(ahead)
    assert late["original_value"] == ahead["original_value"] == message
    assert late["error"] == (
        "1 of 3 event(s) late: event time <= the clock 99 (an EpochWatermark punctuation said every "
        "event up to it had arrived, or the time is before the public --origin 0); those are not counted"
    )
    assert ahead["error"] == (
        "1 of 3 event(s) beyond the horizon 199: more than one substream (W = 100 ms) ahead of the "
        "clock 99; punctuate first; those are not counted"
    )
    assert logic.sketch.items == 1
    at_clock = _batch([(OWN[3], 99)])
    [only] = logic.process(at_clock, 2, TOPIC)
    assert _letter(only)["original_value"] == at_clock and logic.sketch.items == 1
    far = _watermark(2**62 + 5)
    [refused] = logic.process(far, 3, TOPIC)
    letter = _letter(refused)
    assert letter["original_value"] == far and letter["error"].startswith("punctuation refused by the sketch")


def test_event_time_counts_non_integer_items_like_the_core_sketch() -> None:
    """Items that are not all ints travel as a Python list: the logic sorts them by time and feeds
    the core sketch, byte-identical to the core fed the same (item, time) pairs in time order."""
    settings = _window_settings(shards=1)
    logic = WindowShardLogic(settings, 0)
    logic.process(_watermark(TW), 0, TOPIC)
    pairs: list[tuple[object, int]] = [("b", 150), (3, 120), ("a", 110), ("b", 120)]
    assert logic.process(_batch(pairs), 1, TOPIC) == []
    ref = DPSWSketch(settings.params, domain=range(60), noise_key=settings.shard_noise_key(0))
    ref.advance_to(TW - 1)
    ref.update_batch(["a", 3, "b", "b"], [110, 120, 120, 150])
    assert logic.sketch.items == 4 and logic.to_bytes() == ref.to_bytes()
