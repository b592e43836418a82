"""The producer's punctuation schedule is public: neighbouring inputs get the same ticks, and no
event is ever sent behind a tick (so no event's lateness depends on another event)."""

from __future__ import annotations

import numpy as np
import pytest
from privstream.connectors.punctuation import PunctuationSchedule, schedule_ticks, sort_by_time

from privstream.datagen import EventColumns


class _Recorder:
    """Collects what a producer would write, in order: ("events", times) and ("tick", ms)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def send_columns(self, columns: EventColumns) -> int:
        self.log.append(("events", columns.event_time_ms.tolist()))
        return len(columns)

    def punctuate(self, watermark_ms: int) -> None:
        self.log.append(("tick", watermark_ms))


def _run(times: list[int], every: int = 100, start: int = 1000, end: int = 2000, chunk: int = 3) -> _Recorder:
    rec = _Recorder()
    schedule = PunctuationSchedule(rec, every, start, end)
    columns = sort_by_time(EventColumns(np.arange(len(times)), None, np.array(times, dtype=np.int64)))
    for begin in range(0, len(times), chunk):
        schedule.send(
            EventColumns(
                columns.items[begin : begin + chunk], None, columns.event_time_ms[begin : begin + chunk]
            )
        )
    schedule.end()
    return rec


def _ticks(rec: _Recorder) -> list[object]:
    return [v for kind, v in rec.log if kind == "tick"]


def _late(rec: _Recorder) -> int:
    """Events sent after a tick above their time (what a time-epoch job would dead-letter)."""
    high, late = None, 0
    for kind, value in rec.log:
        if kind == "tick":
            high = value
        elif high is not None:
            late += sum(t < high for t in value)  # type: ignore[union-attr]
    return late


BASE = [1005, 1010, 1150, 1160, 1420, 1421, 1422, 1799, 1999]


@pytest.mark.parametrize(
    "extra",
    [50_000, 1_000_000_000, 1001, 0, 1999, 2000],  # far future, far past, inside, on the last tick
)
def test_one_added_event_changes_no_tick_and_makes_no_event_late(extra: int) -> None:
    """The data-driven clock this replaces punctuated after each chunk at the largest time sent, so
    one far-future event made every later event late and added ticks: this fails on it."""
    without, with_extra = _run(BASE), _run([*BASE[:2], extra, *BASE[2:]])  # inserted early, out of order
    assert (
        _ticks(without)
        == _ticks(with_extra)
        == schedule_ticks(100, 1000, 2000)
        == list(range(1000, 2001, 100))
    )
    assert _late(without) == 0 and _late(with_extra) == 0


def test_every_event_is_sent_once_between_the_ticks_around_it() -> None:
    rec = _run(BASE, chunk=2)
    sent = [t for kind, v in rec.log if kind == "events" for t in v]  # type: ignore[union-attr]
    assert sent == sorted(BASE)
    tick, position = None, {}
    for kind, value in rec.log:
        if kind == "tick":
            tick = value
        else:
            for t in value:  # type: ignore[union-attr]
                position[t] = tick
    assert all(position[t] is not None and position[t] <= t < position[t] + 100 for t in BASE)


def test_schedule_refuses_input_that_goes_back_in_time_and_bad_ranges() -> None:
    schedule = PunctuationSchedule(_Recorder(), 100, 0, 1000)
    schedule.send(EventColumns(np.array([1]), None, np.array([500])))
    with pytest.raises(ValueError, match="goes back in time"):
        schedule.send(EventColumns(np.array([1]), None, np.array([499])))
    with pytest.raises(ValueError, match="--punctuate-to"):
        schedule_ticks(100, 1000, 1000)
    with pytest.raises(ValueError, match="--punctuate-every"):
        schedule_ticks(0, 0, 1000)
