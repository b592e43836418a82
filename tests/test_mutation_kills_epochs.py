"""The epoch policies of a shard (operators/epochs.py) against hand-computed references.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py epochs``). Every test
states the data-independent cut the per-epoch privacy claim rests on (epochs are disjoint, so
Lebeda–Tětek Lemma 2 / Cor. 7.2 hold per epoch and the epochs compose in parallel) and checks the
code against an independent reference written here:

* count epochs of ``size``: the event at position ``p`` of a shard's stream (0-based, over all its
  messages) is in epoch ``p // size``; epoch e is closable once the shard has seen ``(e+1)*size``
  events; at the end of input the epochs through the one holding the last event close;
* time epochs of ``length`` with lateness ``L``: an event at time ``t`` is in epoch ``t // length``
  (floor, negative times included); with punctuation clock ``w``, epoch e is closable iff
  ``(e+1)*length + L <= w`` (the reference searches the largest such e); at the end of input iff
  ``(e+1)*length <= w``; an event of an epoch <= the shard's ``closed_through`` is late and not
  counted, and before the first punctuation (``closed_through`` None) every event is early;
* ``ShardProgress``: the clock is the maximum punctuation read (never moves back);
  ``close_through`` emits each epoch exactly once, empty ones included, from ``first_epoch`` to
  the given last; the checkpoint record round-trips and refuses malformed records.
"""

from __future__ import annotations

import numpy as np
import pytest
from privstream.operators.epochs import CountEpochs, ShardProgress, Split, TimeEpochs
from privstream.operators.payloads import EndPayload, EventPayload, UserSetPayload
from privstream.operators.state_records import SHARD_PROGRESS, optional_ints

from privstream.sketches import SketchFormatError
from privstream.sketches.binary_format import encode_envelope


def _events(times: list[int], first_item: int = 0) -> EventPayload:
    """Events with distinct items ``first_item, first_item+1, …`` (so a piece shows which events it
    holds), the given times and user ids ``u<item>``."""
    items = np.arange(first_item, first_item + len(times), dtype=np.int64)
    return EventPayload(items, np.array(times, dtype=np.int64), tuple(f"u{i}" for i in items.tolist()))


def _listed(times: list[int], first_item: int = 0) -> EventPayload:
    """The same with list items (the non-numpy path of ``take``/``select``)."""
    items = [f"x{first_item + i}" for i in range(len(times))]
    return EventPayload(items, np.array(times, dtype=np.int64), ())


def _as_epochs(split: Split) -> list[tuple[int, list[object]]]:
    out = []
    for epoch, piece in split.pieces:
        assert isinstance(piece, EventPayload)
        assert len(piece.items) == len(piece.times)
        out.append((epoch, list(np.asarray(piece.items).tolist())))
    return out


# ---------------------------------------------------------------------------------------------------
# Count epochs: cut on public positions
# ---------------------------------------------------------------------------------------------------


def _count_reference(size: int, seen: int, n: int) -> list[tuple[int, list[int]]]:
    """Event i of the message is at position seen + i, in epoch (seen + i) // size; consecutive
    events of one epoch form one piece."""
    out: list[tuple[int, list[int]]] = []
    for i in range(n):
        epoch = (seen + i) // size
        if out and out[-1][0] == epoch:
            out[-1][1].append(i)
        else:
            out.append((epoch, [i]))
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_count_epochs_cut_every_message_on_public_positions(size: int) -> None:
    """Messages of lengths 0..12 (several straddle 2+ epochs, some start or end exactly on a
    boundary): every event lands in ``position // size``, pieces keep the events' order, the
    shard's count advances by the message length and ``first_epoch`` is the first piece's epoch."""
    lengths = [0, 1, size, 2 * size + 1, 3, 0, size - 1, 7, 12, 1, size * 3]
    for payload_kind in (_events, _listed):
        policy = CountEpochs(size)
        progress = ShardProgress()
        seen = 0
        for n in lengths:
            payload = payload_kind(list(range(100, 100 + n)), first_item=seen)
            split = policy.split(payload, progress)
            want = _count_reference(size, seen, n)
            got = _as_epochs(split)
            assert [e for e, _ in got] == [e for e, _ in want]
            prefix = "x" if payload_kind is _listed else ""
            expected_items = [[f"{prefix}{seen + i}" if prefix else seen + i for i in idx] for _, idx in want]
            assert [items for _, items in got] == expected_items
            for (_, idx), (_, piece) in zip(want, split.pieces, strict=True):
                assert isinstance(piece, EventPayload)
                assert piece.times.tolist() == [100 + i for i in idx]
                if payload_kind is _events:
                    assert piece.users == tuple(f"u{seen + i}" for i in idx)
            assert split.late == 0 and split.late_reason == ""
            seen += n
            assert progress.seen == seen
            assert progress.first_epoch == (None if seen == 0 else 0)
            assert progress.watermark is None and progress.closed_through is None


def test_count_epochs_after_a_restore_start_at_the_restored_position() -> None:
    """A shard restored at position 7 (epoch size 3): its next events are at 7, 8, 9, …, so the
    first piece is epoch 2 (positions 7, 8), then epoch 3; ``first_epoch`` is set from the first
    piece only when none is recorded yet."""
    policy = CountEpochs(3)
    progress = ShardProgress(seen=7)
    split = policy.split(_events([0] * 5, first_item=7), progress)
    assert _as_epochs(split) == [(2, [7, 8]), (3, [9, 10, 11])]
    assert progress.seen == 12 and progress.first_epoch == 2
    kept = ShardProgress(seen=7, first_epoch=0)
    policy.split(_events([0] * 5), kept)
    assert kept.first_epoch == 0 and kept.seen == 12
    empty = ShardProgress(seen=7)
    assert policy.split(_events([]), empty) == Split([], 0)
    assert empty.first_epoch is None and empty.seen == 7


def test_count_epochs_count_a_user_set_as_one_record_at_its_position() -> None:
    """PAMG: a user set is one record; the k-th set of a shard is in epoch k // size (the set
    itself is the piece, never cut)."""
    policy = CountEpochs(2)
    progress = ShardProgress()
    epochs = []
    for k in range(7):
        user_set = UserSetPayload(k, ("a", "b", "c"), 1000 * k)
        split = policy.split(user_set, progress)
        assert len(split.pieces) == 1 and split.pieces[0][1] is user_set and split.late == 0
        epochs.append(split.pieces[0][0])
        assert progress.seen == k + 1
    assert epochs == [k // 2 for k in range(7)]
    assert progress.first_epoch == 0


@pytest.mark.parametrize("size", [1, 3, 4])
def test_count_epochs_close_on_full_epochs_and_finally_through_the_last_event(size: int) -> None:
    """Epoch e is closable iff the shard has seen (e + 1) * size events (boundaries: seen = e*size,
    e*size - 1, e*size + 1); at the end of input every epoch holding an event closes (the partial
    last one too), none if the shard saw nothing."""
    policy = CountEpochs(size)
    for seen in range(0, 5 * size + 2):
        full = [e for e in range(0, 10) if (e + 1) * size <= seen]  # count epochs start at 0
        want_closable = max(full) if full else None
        holding = {p // size for p in range(seen)}
        want_final = max(holding) if holding else None
        progress = ShardProgress(seen=seen)
        assert policy.closable_through(progress) == want_closable, seen
        assert policy.final_through(progress) == want_final, seen


def test_count_epoch_size_is_a_positive_int_and_the_public_bound() -> None:
    assert CountEpochs(1).size == 1
    assert CountEpochs(7).shard_events_bound == 7
    assert CountEpochs(1).shard_events_bound == 1
    for bad in (0, -3):
        with pytest.raises(ValueError, match=r"^epoch_events: must be an int >= 1, got"):
            CountEpochs(bad)
    for bad_type in (True, 2.0, "3", None, np.int64(3)):
        with pytest.raises(ValueError, match=r"^epoch_events: must be an int >= 1, got"):
            CountEpochs(bad_type)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# Time epochs: cut on event time, closed by punctuation less a public lateness
# ---------------------------------------------------------------------------------------------------


def _time_reference(length: int, closed: int, times: list[int]) -> tuple[list[tuple[int, list[int]]], int]:
    """Per epoch (ascending) the indices of the message's events in it, for epochs > closed, and
    the number of events in epochs <= closed (late). Epoch = floor(t / length)."""
    by_epoch: dict[int, list[int]] = {}
    late = 0
    for i, t in enumerate(times):
        epoch = t // length  # Python's floor division: exact, negative times too
        if epoch <= closed:
            late += 1
        else:
            by_epoch.setdefault(epoch, []).append(i)
    return sorted(by_epoch.items()), late


@pytest.mark.parametrize("length", [1, 10, 1000])
def test_time_epochs_cut_each_event_by_its_own_time(length: int) -> None:
    """Messages whose events straddle several epochs, out of order, exactly on epoch boundaries
    (t = e*length, e*length - 1), negative times, with a closed prefix: each event is counted in
    floor(t / length) if that epoch is still open, otherwise it is late and not counted; pieces are
    in ascending epoch order and keep the events' order within an epoch."""
    rng = np.random.default_rng(5)
    for closed in (-3, -1, 0, 2, 4):
        for payload_kind in (_events, _listed):
            for trial in range(12):
                n = int(rng.integers(1, 14))
                base = [e * length + d for e in range(-3, 8) for d in (0, length - 1)]
                times = [int(x) for x in rng.choice(base, size=n)]
                if trial == 0:
                    times = [(closed + 1) * length, (closed + 1) * length - 1, closed * length]
                    n = len(times)
                payload = payload_kind(times, first_item=50)
                progress = ShardProgress(seen=9, first_epoch=0, closed_through=closed, watermark=77)
                split = TimeEpochs(length, 5).split(payload, progress)
                want, late = _time_reference(length, closed, times)
                got = _as_epochs(split)
                assert [e for e, _ in got] == [e for e, _ in want]
                prefix = "x" if payload_kind is _listed else ""
                assert [items for _, items in got] == [
                    [f"{prefix}{50 + i}" if prefix else 50 + i for i in idx] for _, idx in want
                ]
                for (_, idx), (_, piece) in zip(want, split.pieces, strict=True):
                    assert isinstance(piece, EventPayload)
                    assert piece.times.tolist() == [times[i] for i in idx]
                    if payload_kind is _events:
                        assert piece.users == tuple(f"u{50 + i}" for i in idx)
                    if len(idx) == len(times):
                        assert piece is payload  # the whole message in one epoch: not copied
                assert split.late == late
                if late:
                    assert split.late_reason == f"late (their epochs <= {closed} were closed by punctuation)"
                else:
                    assert split.late_reason == ""
                assert progress.seen == 9 + n - late  # only counted events
                assert (progress.first_epoch, progress.closed_through, progress.watermark) == (0, closed, 77)


def test_time_epochs_a_message_all_in_one_open_epoch_is_one_piece() -> None:
    policy = TimeEpochs(100)
    payload = _events([300, 399, 350])
    progress = ShardProgress(first_epoch=0, closed_through=2)
    split = policy.split(payload, progress)
    assert split.pieces == [(3, payload)] and split.pieces[0][1] is payload
    assert split.late == 0 and split.late_reason == "" and progress.seen == 3
    # one event one past the closed epoch's end: counted; one exactly at its last ms: late
    split = policy.split(_events([299, 300]), progress)
    assert _as_epochs(split) == [(3, [1])] and split.late == 1 and progress.seen == 4


def test_time_epochs_events_before_the_first_punctuation_are_early_not_counted() -> None:
    policy = TimeEpochs(100, 50)
    progress = ShardProgress(seen=0)
    split = policy.split(_events([5, 1000, -20]), progress)
    assert split.pieces == [] and split.late == 3
    assert split.late_reason == "early (before this partition's first EpochWatermark punctuation)"
    assert progress.seen == 0 and progress.first_epoch is None
    # an empty message is nothing, early or not
    assert policy.split(_events([]), ShardProgress()) == Split([], 0)
    assert policy.split(_events([]), ShardProgress(closed_through=3)) == Split([], 0)


def test_time_epochs_a_user_set_counts_at_its_own_time() -> None:
    policy = TimeEpochs(1000)
    progress = ShardProgress(first_epoch=0, closed_through=1)
    user_set = UserSetPayload(4, ("a",), 2999)
    split = policy.split(user_set, progress)
    assert split.pieces == [(2, user_set)] and split.late == 0 and progress.seen == 1
    late_set = UserSetPayload(4, ("a",), 1999)
    split = policy.split(late_set, progress)
    assert split.pieces == [] and split.late == 1 and progress.seen == 1
    assert split.late_reason == "late (their epochs <= 1 were closed by punctuation)"


def test_time_epochs_times_of_each_payload_kind() -> None:
    policy = TimeEpochs(10)
    events = _events([3, -4, 12])
    assert policy._times(events) is events.times
    times = policy._times(UserSetPayload(1, ("a",), 123))
    assert times.dtype == np.int64 and times.tolist() == [123]
    times = policy._times(EndPayload("p", 5))  # a payload without an event time: time 0
    assert times.dtype == np.int64 and times.tolist() == [0]
    # event times are int64 milliseconds: a user set's time outside int64 is refused, never taken
    # as an unsigned or object array whose epochs would be computed on another scale
    edge = policy._times(UserSetPayload(1, ("a",), 2**63 - 1))
    assert edge.dtype == np.int64 and edge.tolist() == [2**63 - 1]
    for outside in (2**63, -(2**63) - 1):
        with pytest.raises(OverflowError):
            policy._times(UserSetPayload(1, ("a",), outside))


@pytest.mark.parametrize(("length", "lateness"), [(1, 0), (10, 0), (10, 3), (10, 10), (10, 25), (7, 1)])
def test_time_epochs_close_on_punctuation_less_lateness(length: int, lateness: int) -> None:
    """Epoch e is closable iff (e + 1) * length + lateness <= watermark (so exactly at the allowed
    lateness it closes, one ms before it does not); at the end of input iff (e + 1) * length <=
    watermark (lateness no longer matters); no punctuation: nothing closes."""
    policy = TimeEpochs(length, lateness)
    for watermark in range(-3 * length - lateness, 6 * length + lateness + 2):
        closable = [e for e in range(-20, 40) if (e + 1) * length + lateness <= watermark]
        final = [e for e in range(-20, 40) if (e + 1) * length <= watermark]
        progress = ShardProgress(watermark=watermark)
        assert policy.closable_through(progress) == max(closable), (watermark, lateness)
        assert policy.final_through(progress) == max(final), watermark
    assert policy.closable_through(ShardProgress(seen=5)) is None
    assert policy.final_through(ShardProgress(seen=5)) is None


def test_time_epochs_lateness_boundary_for_one_event() -> None:
    """Length 1000, lateness 200: an event at t = 999 (epoch 0) still counts after a punctuation
    at 1199 (epoch 0 open: 1000 + 200 > 1199) and is late after one at 1200 (exactly the allowed
    lateness after its epoch's end)."""
    policy = TimeEpochs(1000, 200)
    for watermark, counted in ((1199, True), (1200, False), (1201, False)):
        progress = ShardProgress()
        progress.punctuate(0)
        progress.close_through(policy.closable_through(progress))  # the first punctuation: start
        progress.punctuate(watermark)
        progress.close_through(policy.closable_through(progress))
        split = policy.split(_events([999]), progress)
        assert (split.late == 0) is counted, watermark
        assert [e for e, _ in split.pieces] == ([0] if counted else [])


def test_time_epoch_parameters_are_checked() -> None:
    assert TimeEpochs(1).length_ms == 1 and TimeEpochs(1).lateness_ms == 0
    policy = TimeEpochs(60_000, 0)
    assert (policy.length_ms, policy.lateness_ms) == (60_000, 0)
    assert TimeEpochs(5, 7).lateness_ms == 7
    with pytest.raises(ValueError, match=r"^epoch \(ms\): must be an int >= 1, got 0"):
        TimeEpochs(0)
    with pytest.raises(ValueError, match=r"^lateness \(ms\): must be an int >= 0, got -1"):
        TimeEpochs(10, -1)
    for bad_type in (True, 1.5, None):
        with pytest.raises(ValueError, match=r"^epoch \(ms\): must be an int >= 1, got"):
            TimeEpochs(bad_type)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^lateness \(ms\): must be an int >= 0, got"):
            TimeEpochs(10, bad_type)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# ShardProgress: the punctuation clock, closing epochs, the checkpoint record
# ---------------------------------------------------------------------------------------------------


def test_the_punctuation_clock_never_moves_back() -> None:
    progress = ShardProgress()
    stream = [500, 300, 500, 1200, -7, 1199, 4000, 0]
    clock = None
    for w in stream:
        progress.punctuate(w)
        clock = w if clock is None else max(clock, w)
        assert progress.watermark == clock
    first = ShardProgress()
    first.punctuate(-50)  # a first punctuation is taken as is, even below 0
    assert first.watermark == -50
    first.punctuate(-60)
    assert first.watermark == -50


def _close_reference(
    first: int | None, closed: int | None, last: int | None
) -> tuple[list[int] | None, int | None, int | None]:
    """(emitted epochs or None, first_epoch after, closed_through after), from the definition:
    nothing new if last is None or <= closed; a shard without a first epoch starts at last + 1;
    otherwise every epoch from max(first, closed + 1) through last, each once."""
    if last is None or (closed is not None and last <= closed):
        return None, first, closed
    if first is None:
        first = last + 1
    start = first if closed is None else max(first, closed + 1)
    return [e for e in range(start, last + 1)], first, last


def test_close_through_emits_each_epoch_once_from_the_first_to_the_given_last() -> None:
    progress = ShardProgress(first_epoch=0)
    assert list(progress.close_through(2) or []) == [0, 1, 2]
    assert progress.close_through(2) is None and progress.close_through(1) is None
    assert progress.close_through(None) is None
    assert list(progress.close_through(3) or []) == [3]
    assert list(progress.close_through(7) or []) == [4, 5, 6, 7]  # empty epochs included
    assert (progress.first_epoch, progress.closed_through) == (0, 7)
    # a time shard's first punctuation: no epoch yet, it starts after the closable one
    timed = ShardProgress()
    started = timed.close_through(4)
    assert started is not None and list(started) == [] and (timed.first_epoch, timed.closed_through) == (5, 4)
    assert list(timed.close_through(6) or []) == [5, 6]
    # a first epoch after the closed one (e.g. a count shard restored after a gap): from first_epoch
    gap = ShardProgress(first_epoch=5, closed_through=1)
    assert list(gap.close_through(7) or []) == [5, 6, 7]
    # nothing closed yet, first epoch set: from first_epoch (a negative one too)
    negative = ShardProgress(first_epoch=-2)
    assert list(negative.close_through(0) or []) == [-2, -1, 0]


def test_close_through_against_the_definition_over_call_sequences() -> None:
    """Random call sequences (lasts going back and forth, None, negative) from random starting
    states: the emitted epochs and the state match the reference each call, and over a sequence
    no epoch is emitted twice."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        first = None if rng.random() < 0.4 else int(rng.integers(-3, 6))
        closed = None if rng.random() < 0.5 else int(rng.integers(-4, 6))
        progress = ShardProgress(first_epoch=first, closed_through=closed)
        emitted: list[int] = []
        for _ in range(8):
            last = None if rng.random() < 0.15 else int(rng.integers(-5, 14))
            want, first, closed = _close_reference(first, closed, last)
            got = progress.close_through(last)
            assert (None if got is None else list(got)) == want
            assert (progress.first_epoch, progress.closed_through) == (first, closed)
            emitted += want or []
        assert len(emitted) == len(set(emitted))


def test_from_bytes_of_nothing_is_a_fresh_shard() -> None:
    for nothing in (None, b""):
        fresh = ShardProgress.from_bytes(nothing)
        assert fresh == ShardProgress()
        assert (fresh.seen, fresh.watermark, fresh.first_epoch, fresh.closed_through, fresh.misrouted) == (
            0, None, None, None, None,
        )  # fmt: skip


@pytest.mark.parametrize(
    "progress",
    [
        ShardProgress(),
        ShardProgress(seen=0, watermark=0, first_epoch=0, closed_through=0),
        ShardProgress(seen=1, watermark=-5, first_epoch=-1, closed_through=-2),
        ShardProgress(seen=2**40, watermark=2**62, first_epoch=3, closed_through=None),
        ShardProgress(
            seen=9, watermark=None, first_epoch=None, closed_through=4, misrouted="misrouted: 1 of 1"
        ),
        ShardProgress(seen=3, misrouted=""),
        ShardProgress(seen=3, watermark=7, misrouted="é ✓"),
    ],
)
def test_shard_progress_round_trips(progress: ShardProgress) -> None:
    restored = ShardProgress.from_bytes(progress.to_bytes())
    assert restored == progress
    assert type(restored.seen) is int and restored.misrouted == progress.misrouted


def _record(values: list[int | None], flag: int, reason: bytes, *, flags: int | None = None) -> bytes:
    params = optional_ints(values)
    if flags is not None:
        params[0] = flags
    return encode_envelope(SHARD_PROGRESS, [*params, flag], reason)


def test_from_bytes_refuses_malformed_records() -> None:
    ok = _record([4, 10, 0, 1], 0, b"")
    assert ShardProgress.from_bytes(ok) == ShardProgress(4, 10, 0, 1, None)
    assert ShardProgress.from_bytes(_record([0, None, None, None], 0, b"")) == ShardProgress()
    assert ShardProgress.from_bytes(_record([5, None, None, None], 1, b"")).misrouted == ""
    bad = [
        _record([None, 10, 0, 1], 0, b""),  # no event count
        _record([-1, 10, 0, 1], 0, b""),  # a negative event count
        _record([4, 10, 0, 1], 2, b""),  # a misrouted flag that is not 0/1
        _record([4, 10, 0, 1], 0, b"misrouted"),  # a reason without the flag
        _record([4, 10, 0, 1], 0, b"", flags=0b11111),  # a presence bit for a fifth value
        encode_envelope(SHARD_PROGRESS, [*optional_ints([4, 10, 0, 1]), 0, 0], b""),  # 7 params
        encode_envelope(SHARD_PROGRESS, optional_ints([4, 10, 0, 1]), b""),  # 5 params
        encode_envelope(SHARD_PROGRESS + 1, [*optional_ints([4, 10, 0, 1]), 0], b""),  # another record
    ]
    for data in bad:
        with pytest.raises(SketchFormatError):
            ShardProgress.from_bytes(data)
    # the refusal names the record it expected (a checkpoint restored from another operator's state)
    with pytest.raises(SketchFormatError, match=r"^wrong sketch type: expected ShardProgress, got "):
        ShardProgress.from_bytes(bad[-1])


def test_a_time_shard_releases_every_epoch_from_its_first_punctuation_to_its_last() -> None:
    """End to end on one shard (length 100, lateness 30), punctuations 250, 240 (older than the
    clock: ignored), 420, 431 with events in between. Reference: the first punctuation closes
    through (250 - 30) // 100 - 1 = 1, so the shard's epochs start at 2; 420 closes through 2,
    431 through 3 (epoch 4 needs a clock of 530); at the end of input through 431 // 100 - 1 = 3,
    nothing new. Each event is counted in its own epoch if open, else late."""
    policy = TimeEpochs(100, 30)
    progress = ShardProgress()
    released: list[int] = []
    counted: dict[int, list[int]] = {}

    def punctuate(w: int) -> None:
        progress.punctuate(w)
        out = progress.close_through(policy.closable_through(progress))
        released.extend(out or [])

    def send(times: list[int]) -> int:
        split = policy.split(_events(times), progress)
        for epoch, piece in split.pieces:
            counted.setdefault(epoch, []).extend(piece.times.tolist())  # type: ignore[union-attr]
        return split.late

    assert send([10, 260]) == 2  # before the first punctuation: early
    punctuate(250)
    assert (progress.first_epoch, progress.closed_through, released) == (2, 1, [])
    assert send([199, 200, 299, 350, 420]) == 1  # 199 is in epoch 1: closed
    punctuate(240)  # older than the clock: nothing moves
    assert progress.watermark == 250 and released == []
    punctuate(420)  # (420 - 30) // 100 - 1 = 2
    assert released == [2]
    assert send([250, 300, 399]) == 1  # 250 (epoch 2) is now late, 300 and 399 count in epoch 3
    punctuate(431)  # 401 // 100 - 1 = 3
    assert released == [2, 3]
    assert send([399, 430, 530]) == 1
    released.extend(progress.close_through(policy.final_through(progress)) or [])  # 431 // 100 - 1 = 3
    assert released == [2, 3]
    assert counted == {2: [200, 299], 3: [350, 300, 399], 4: [420, 430], 5: [530]}
    assert progress.seen == 8
