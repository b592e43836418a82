"""Several misrouted and malformed messages, interleaved with good ones, through the jobs' logic
(Flink-free: the operator bodies run on in-memory state; no Flink cluster, no Kafka).

What each job documents and this file checks for a *sequence* of bad messages, not one:

* heavy-hitters (``ShardSketchFunction.process_element`` over ``ShardSketcher``; the guarantee is
  Lebeda–Tětek Cor. 7.2's "one event in one shard", which holds only if the partition of an event
  is a hash of the event, ``operators/routing.py``): every undecodable, wrongly typed, partly late
  or misrouted message goes to the dead letters whole (its original bytes, partition, offset and
  reason); a misrouted message is not counted at all, and from the first one on the shard fails
  closed — its progress keeps the *first* reason for good (also across a restore), every epoch it
  closes later carries it, a refusal is emitted at once for epochs the merge still holds, and the
  release step publishes and charges nothing for a refused epoch. Right-routed events keep being
  counted (their epochs are refused anyway); malformed messages before the first misrouting do not
  stop releases;
* sliding-window (``WindowShardLogic``; DPSW, Wang–Wang–Chen Alg. 2): malformed messages are
  dead-lettered and releases go on; after the first misrouted message the shard refuses for good —
  every later message, good or bad, is dead-lettered with the first reason and nothing more is
  counted or released;
* ldp-heavy-hitters (``LdpServerLogic``, HG-LDP): undecodable and foreign messages are
  dead-lettered with their reason and never applied; the good reports around them are.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.operators.epochs import ShardProgress, TimeEpochs
from privstream.operators.shard_logic import EpochMerger, ShardSketch
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.test_hooks import TestHooks

from privstream.partitioning import partition_for
from privstream.sketches import load_sketch

SHARDS = 2
TOPIC = "events"
OWN = [x for x in range(400) if partition_for(np.asarray([x]), SHARDS)[0] == 0][:8]  #: shard 0's items
OTHER = [x for x in range(400) if partition_for(np.asarray([x]), SHARDS)[0] == 1][:8]  #: shard 1's


def batch(items: list[int], t: int) -> bytes:
    return encode("EventBatch", {"events": [{"item": x, "user_id": None, "event_time": t} for x in items]})


def batch_at(pairs: list[tuple[int, int]]) -> bytes:
    events = [{"item": x, "user_id": None, "event_time": t} for x, t in pairs]
    return encode("EventBatch", {"events": events})


def watermark(ms: int) -> bytes:
    return encode("EpochWatermark", {"producer_id": "clock", "watermark_ms": ms})


USER_SET = encode("UserSetEvent", {"user_id": 4, "items": [1, 2], "event_time": 7})  # wrong type here


def dead_letter(record: bytes) -> dict[str, Any]:
    name, fields = decode(record)
    assert name == "DeadLetter"
    return fields


# ---------------------------------------------------------------------------------------------------
# heavy-hitters: the real operator body on in-memory keyed state
# ---------------------------------------------------------------------------------------------------


class MapStateStub:
    """In-memory stand-in for Flink's ``MapState`` (get/put/remove/keys)."""

    def __init__(self) -> None:
        self.data: dict[int, bytes] = {}

    def get(self, key: int) -> bytes | None:
        return self.data.get(key)

    def put(self, key: int, value: bytes) -> None:
        self.data[key] = value

    def remove(self, key: int) -> None:
        self.data.pop(key, None)

    def keys(self) -> Iterator[int]:
        return iter(list(self.data))


class ValueStateStub:
    def __init__(self, value: bytes | None = None) -> None:
        self._value = value

    def value(self) -> bytes | None:
        return self._value

    def update(self, value: bytes) -> None:
        self._value = value


class ListStateStub:
    """In-memory stand-in for Flink's ``ListState`` (get/add/clear)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def get(self) -> list[Any]:
        return list(self.items)

    def add(self, value: Any) -> None:
        self.items.append(value)

    def clear(self) -> None:
        self.items.clear()


class _Timers:
    def register_event_time_timer(self, timestamp: int) -> None:
        pass


class ContextStub:
    def timer_service(self) -> _Timers:
        return _Timers()


def shard_function(
    spec: SketchSpec, sketches: MapStateStub, progress: ValueStateStub, since: ListStateStub | None = None
) -> Any:
    from privstream.operators.sketch_operator import ShardSketchFunction
    from privstream.operators.unflushed import UnflushedMessages

    function = ShardSketchFunction(spec, TimeEpochs(1000), TOPIC, shards=SHARDS)
    function.sketches, function.progress = sketches, progress  # what open() gets from Flink
    function.since = UnflushedMessages(ListStateStub() if since is None else since)
    return function


def run(function: Any, messages: list[tuple[int, bytes]]) -> tuple[dict[int, dict], list[ShardSketch]]:
    """Feed shard 0's ``(offset, bytes)`` messages; ``({offset: dead letter}, shard sketches)``."""
    from privstream.operators.shard_operator import DEAD_LETTERS

    letters: dict[int, dict] = {}
    sketches: list[ShardSketch] = []
    for offset, value in messages:
        for out in function.process_element((value, 0, offset), ContextStub()):
            if isinstance(out, ShardSketch):
                sketches.append(out)
            else:
                tag, record = out
                assert tag is DEAD_LETTERS and offset not in letters  # one dead letter per message
                letters[offset] = dead_letter(record)
    return letters, sketches


@pytest.mark.parametrize("mode", ["per-shard", "merged"])
def test_heavy_hitters_several_bad_messages_interleaved(mode: str) -> None:
    from privstream.operators.release_logic import EpochReleaser, ReleaseConfig

    spec = SketchSpec("mg", 8, release_mode=mode)
    messages = [
        (0, watermark(0)),  # the first punctuation: epochs start at 0
        (1, batch(OWN[:3], 10)),  # good
        (2, b"\x00not avro"),  # malformed: undecodable
        (3, USER_SET),  # malformed: a user set sent to an event-level job
        (4, batch(OWN[3:5], 20)),  # good
        (5, watermark(1000)),  # closes epoch 0: {OWN[0..4]: 1}
        (6, batch_at([(OWN[5], 500), (OWN[6], 1100)])),  # one late event (epoch 0 closed), one counted
        (7, batch([OWN[7], OTHER[0]], 1200)),  # misrouted: 1 of 2 hashes to shard 1 -> fail closed
        (8, batch([OWN[6]], 1300)),  # good: counted, but its epoch is refused
        (9, b""),  # malformed again
        (10, batch(OTHER[1:4], 1400)),  # misrouted again: 3 of 3
        (11, batch(OWN[:2], 1500)),  # good
        (12, watermark(3000)),  # closes epochs 1 and 2: refused
    ]
    sketches, progress = MapStateStub(), ValueStateStub()
    first = shard_function(spec, sketches, progress)
    letters, closed = run(first, messages)

    # every bad message is dead-lettered whole, with its reason; the good ones are not
    assert sorted(letters) == [2, 3, 6, 7, 9, 10]
    values = dict(messages)
    for offset, letter in letters.items():
        assert letter["original_value"] == values[offset]  # nothing lost: the message itself
        assert (letter["partition"], letter["offset"], letter["topic"]) == (0, offset, TOPIC)
    assert letters[2]["error"].startswith("undecodable") and letters[9]["error"].startswith("undecodable")
    assert "EventBatch or Event" in letters[3]["error"]
    assert letters[6]["error"].startswith("1 event(s)") and "not counted" in letters[6]["error"]
    assert "misrouted: 1 of 2 event(s)" in letters[7]["error"] and "fail closed" in letters[7]["error"]
    assert "misrouted: 3 of 3 event(s)" in letters[10]["error"] and "fail closed" in letters[10]["error"]

    # the shard keeps the FIRST reason for good (in its checkpointed progress, so across restores)
    first_reason = ShardProgress.from_bytes(progress.value()).misrouted
    assert (
        first_reason is not None
        and "1 of 2 event(s)" in first_reason
        and first_reason.startswith("partition 0")
    )

    # what was counted: exactly the good events (and the on-time event of the partly late message)
    by_epoch = {s.epoch: s for s in closed if s.epoch is not None}
    assert sorted(by_epoch) == [0, 1, 2]
    assert load_sketch(by_epoch[0].data).counters() == {x: 1 for x in OWN[:5]}
    assert load_sketch(by_epoch[1].data).counters() == {OWN[6]: 2, OWN[0]: 1, OWN[1]: 1}
    assert load_sketch(by_epoch[2].data).counters() == {}
    assert by_epoch[0].refused is None  # closed before the first misrouted message
    assert by_epoch[1].refused == by_epoch[2].refused == first_reason
    refusals = [s for s in closed if s.epoch is None and s.refused is not None]
    assert len(refusals) == 2 and all(r.closed_through == 0 for r in refusals)  # one per misrouting

    # the merge: shard 1 closed epoch 0 before shard 0's refusal arrived, so epoch 0 is released
    merger = EpochMerger(SHARDS, spec)
    merged = []
    position = closed.index(by_epoch[0]) + 1
    for message in [*closed[:position], ShardSketch(1, None, None, 0), *closed[position:]]:
        merged += merger.add(message)
    merged += merger.add(ShardSketch(1, None, None, 5))
    assert [(m.epoch, m.refused) for m in merged] == [(0, None), (1, first_reason), (2, first_reason)]

    config = ReleaseConfig(1.0, 1e-6, 10.0, 1e-5, f"hh/several-bad/{mode}")
    releaser = EpochReleaser(config, spec, TimeEpochs(1000), hooks=TestHooks(noise_seed=3))
    published, entry = releaser.release(merged[0])
    assert published is not None and entry is not None
    assert decode(published)[1]["epoch"] == 0
    for refused in merged[1:]:
        assert releaser.release(refused) == (None, None)  # nothing published, nothing charged
    assert releaser.ledger.sequence == 1

    # a restore (same keyed state) keeps refusing; one more misrouted and one more malformed message
    restored = shard_function(spec, sketches, ValueStateStub(progress.value()), first.since.state)
    more, later = run(restored, [(13, batch([OTHER[5]], 3100)), (14, USER_SET), (15, watermark(4000))])
    assert sorted(more) == [13, 14] and "misrouted" in more[13]["error"]
    assert ShardProgress.from_bytes(restored.progress.value()).misrouted == first_reason
    assert [(s.epoch, s.refused) for s in later if s.epoch is not None] == [(3, first_reason)]


def test_heavy_hitters_malformed_messages_alone_do_not_stop_releases() -> None:
    """Several malformed (not misrouted) messages: dead-lettered, nothing counted from them, and
    every epoch is still released (only misrouting fails closed)."""
    spec = SketchSpec("mg", 8)
    bad = [b"\x01", USER_SET, b"", encode("EndMarker", {"producer_id": "p", "events_sent": 1})[:-1]]
    messages = [(0, watermark(0))]
    for i, value in enumerate(bad):
        messages += [(2 * i + 1, value), (2 * i + 2, batch([OWN[i]], 100 * i + 10))]
    messages.append((len(messages), watermark(1000)))
    letters, closed = run(shard_function(spec, MapStateStub(), ValueStateStub()), messages)
    assert sorted(letters) == [1, 3, 5, 7]
    assert all(letters[o]["original_value"] == dict(messages)[o] for o in letters)
    [epoch0] = [s for s in closed if s.epoch == 0]
    assert epoch0.refused is None and load_sketch(epoch0.data).counters() == {x: 1 for x in OWN[:4]}


# ---------------------------------------------------------------------------------------------------
# sliding-window: WindowShardLogic
# ---------------------------------------------------------------------------------------------------


def test_sliding_window_several_bad_messages_interleaved() -> None:
    from privstream.operators.window_logic import LedgerCharge, WindowSettings, WindowShardLogic

    settings = WindowSettings(
        window=200, substream=50, depth=3, width=64, epsilon=1.0, delta=1e-6, domain_size=400,
        gamma=0.1, shards=SHARDS, checkpoints=(50, 8, 1), budget_ratio=0.5, queries=(0, 1),
        charge=LedgerCharge("sliding-window/several-bad", 1, "abc"), submission_key=bytes(range(32)),
    )  # fmt: skip
    logic = WindowShardLogic(settings, 0)
    own = np.array(OWN)
    messages = [
        (0, b"\x00not avro"),
        (1, batch([int(x) for x in np.resize(own, 30)], 1)),  # good: 30 items
        (2, USER_SET),
        (3, watermark(5)),  # count windows ignore punctuation
        (4, batch([int(x) for x in np.resize(own, 30)], 1)),  # good: 60 items, a release at 50
        (5, b""),
        (6, batch([OWN[0], OTHER[0], OTHER[1]], 1)),  # misrouted: the shard refuses from now on
        (7, batch([int(x) for x in np.resize(own, 45)], 1)),  # good, but refused: would reach 100 and release
        (8, batch(OTHER[2:4], 1)),  # misrouted again
        (9, b"\x02junk"),  # malformed after the refusal
    ]
    outputs = {offset: logic.process(value, offset, TOPIC) for offset, value in messages}
    kinds = {offset: [kind for kind, _ in out] for offset, out in outputs.items()}
    assert kinds == {
        0: ["dead-letter"], 1: [], 2: ["dead-letter"], 3: [], 4: ["release"], 5: ["dead-letter"],
        6: ["dead-letter"], 7: ["dead-letter"], 8: ["dead-letter"], 9: ["dead-letter"],
    }  # fmt: skip
    letters = {o: dead_letter(out[0][1]) for o, out in outputs.items() if kinds[o] == ["dead-letter"]}
    for offset, letter in letters.items():
        assert letter["original_value"] == dict(messages)[offset]
        assert (letter["partition"], letter["offset"]) == (0, offset)
    assert letters[0]["error"].startswith("undecodable") and letters[5]["error"].startswith("undecodable")
    assert "EventBatch or Event" in letters[2]["error"]
    first = letters[6]["error"]
    assert "misrouted: 2 of 3 event(s)" in first and "releases nothing more" in first
    assert logic.refused is not None and logic.refused in first
    for offset in (7, 8, 9):  # after the first misrouting every message is refused with that reason
        assert letters[offset]["error"] == f"shard refuses releases: {logic.refused}"
    assert logic.sketch.items == 60  # the good messages before the misrouting, nothing after


# ---------------------------------------------------------------------------------------------------
# ldp-heavy-hitters: LdpServerLogic
# ---------------------------------------------------------------------------------------------------


def test_ldp_several_malformed_reports_interleaved() -> None:
    from privstream.connectors.ldp_producer import report_to_record
    from privstream.connectors.ldp_state import state_from_record
    from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings

    from privstream.ldp import LdpReport, make_client
    from privstream.noise.rng import SeededRandomSource

    rnd = random.Random(0)
    warm = tuple(rnd.choices(range(100), k=200))
    settings = LdpServerSettings(
        scheme="cnr", epsilon=2.0, domain_size=100, k=5, deployment="d", warm_up=warm,
        epoch_reports=1000, state_every=1000, noise_key=bytes(range(32)),
    )  # fmt: skip
    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource(1))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    start = logic.server.n
    stale = report_to_record(LdpReport("hg-cnr", client._canonical, b"\x01", state_version=10**6))
    bad = {3: b"\x00", 7: batch([1, 2], 5), 8: b"", 12: USER_SET, 14: encode("LdpReport", stale)}
    letters = {}
    for offset in range(16):
        report = encode("LdpReport", report_to_record(client.encode(rnd.randrange(100))))
        value = bad[offset] if offset in bad else report
        for kind, data in logic.process(value, 2, offset, "reports"):
            if kind == "dead-letter":
                letters[offset] = dead_letter(data)
            elif kind == "state":
                client.update_state(state_from_record(decode(data)[1]))
    assert sorted(letters) == sorted(bad)
    for offset, letter in letters.items():  # nothing lost: the message, where it came from, and why
        assert letter["original_value"] == bad[offset] and letter["offset"] == offset
        assert (letter["partition"], letter["topic"]) == (2, "reports") and letter["error"]
    assert "stale" in letters[14]["error"]
    assert letters[3]["error"].startswith("AvroDecodeError") and letters[8]["error"].startswith(
        "AvroDecodeError"
    )
    assert "not an LdpReport (EventBatch)" in letters[7]["error"]
    assert "not an LdpReport (UserSetEvent)" in letters[12]["error"]
    assert logic.server.n - start == 16 - len(bad)  # exactly the good reports were applied


@pytest.mark.parametrize("partition", [SHARDS, -1])
def test_a_partition_the_job_was_not_started_for_fails_the_job_naming_it(partition: int) -> None:
    """The source keys a partition outside 0 … shards − 1 (added to the topic after the start) by
    −1; its message fails the job loudly, before anything reads or counts it, never silently joins
    a shard (which would break partition = shard)."""
    sketches, progress = MapStateStub(), ValueStateStub()
    function = shard_function(SketchSpec("mg", 8), sketches, progress)
    with pytest.raises(
        ValueError, match=rf"^partition {partition}: this job was started for {SHARDS} partitions"
    ):
        next(function.process_element((batch(OWN[:2], 10), partition, 0), ContextStub()))
    assert progress.value() is None and not sketches.data
