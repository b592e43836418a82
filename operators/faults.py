"""TESTS ONLY: deterministic failure injection for the exactly-once tests.

:class:`TestFaults` ``(fail_marker, fail_after)``: the sketch operator raises once, when shard 0
has counted ``fail_after`` events; the marker file (outside Flink state, so it survives the
restore) records that it already failed. Never set in production.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class InjectedFailure(RuntimeError):
    """The test-only failure."""


@dataclass(frozen=True)
class TestFaults:
    fail_marker: str | None = None
    fail_after: int = 0

    def on_message(self, shard: int, seen_events: int) -> None:
        if self.fail_marker and shard == 0 and seen_events >= self.fail_after:
            try:
                fd = os.open(self.fail_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            raise InjectedFailure(f"TEST ONLY: injected failure after {seen_events} events of shard 0")
