"""The messages a keyed operator counted since it last wrote its sketch to Flink state (issue 25).

An operator that keeps its sketch in memory between messages (O(events) per message, not O(k))
checkpoints the sketch as last written plus the messages since, each appended once to a
``ListState``. A restore rebuilds the sketch from the written bytes and replays those messages in
order; the source then replays the messages after the checkpoint. The replay must emit nothing
that was emitted before the checkpoint, so a message with any output (a release, a closed epoch, a
dead letter) is always written at once (``flush=True``), never appended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The sketch is written to Flink state at least every this many messages, bounding the messages a
#: restore replays (and the size of the ``ListState``).
FLUSH_EVERY = 64


class UnflushedMessages:
    """Per key (shard): the messages since the last write, in a Flink ``ListState`` (keyed: the
    current key's list), and how many there are."""

    def __init__(self, state: Any, every: int = FLUSH_EVERY) -> None:
        self.state = state
        self.every = every
        self._counts: dict[int, int] = {}

    def restore(self, shard: int) -> list[Any]:
        """The current key's messages since its last write, oldest first (to replay after a restore)."""
        messages = list(self.state.get() or [])
        self._counts[shard] = len(messages)
        return messages

    def commit(self, shard: int, message: Any | None, flush: bool, write: Callable[[], None]) -> None:
        """After a message that changed the sketch: ``write()`` it and forget the messages when
        ``flush`` (the message had outputs) or :attr:`every` messages have gone unwritten; else
        append ``message`` (nothing to append: None)."""
        if flush or self._counts.get(shard, 0) + 1 >= self.every:
            write()
            self.state.clear()
            self._counts[shard] = 0
        elif message is not None:
            self.state.add(message)
            self._counts[shard] = self._counts.get(shard, 0) + 1
