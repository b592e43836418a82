"""TESTS ONLY: deterministic failure injection and pacing for the exactly-once tests.

``FailOnce(marker, after)``: the operator raises once, once shard 0 has counted ``after`` events, the
first time it gets there; the marker file (outside Flink state, so it survives the restore)
records that it already failed. ``pace_ms`` slows the sketch operator per message so that
checkpoints complete while the stream is still being read. Never set in production.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


class InjectedFailure(RuntimeError):
    """The test-only failure."""


@dataclass(frozen=True)
class TestFaults:
    fail_marker: str | None = None
    fail_after: int = 0
    pace_ms: int = 0

    def on_message(self, shard: int, seen_events: int) -> None:
        if self.pace_ms:
            time.sleep(self.pace_ms / 1000)
        if self.fail_marker and shard == 0 and seen_events >= self.fail_after:
            try:
                fd = os.open(self.fail_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            raise InjectedFailure(f"TEST ONLY: injected failure after {seen_events} events of shard 0")
