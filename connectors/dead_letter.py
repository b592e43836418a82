"""Dead letters: messages that failed to decode or process, kept verbatim with the reason.

A consumer never drops a message it cannot use: it wraps the original key and value bytes, the
reason and the source topic/partition/offset into an Avro ``DeadLetter`` record and sends it to
``<topic>-dlq`` (``events`` -> ``events-dlq``), and flushes the dead letters before it commits
offsets past them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from privstream.connectors.avro_codec import encode
from privstream.connectors.topics import dead_letter_topic


def dead_letter_record(
    *,
    value: bytes | None,
    error: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None = None,
    failed_time_ms: int | None = None,
) -> dict[str, Any]:
    """The ``DeadLetter`` record for one failed message."""
    return {
        "original_value": None if value is None else bytes(value),
        "original_key": None if key is None else bytes(key),
        "error": str(error),
        "topic": topic,
        "partition": int(partition),
        "offset": int(offset),
        "failed_time": int(time.time() * 1000) if failed_time_ms is None else int(failed_time_ms),
    }


class DeadLetterSink:
    """Sends dead letters through a kafka-python producer to ``topic_for(source_topic)``."""

    def __init__(self, producer: Any, topic_for: Callable[[str], str] = dead_letter_topic) -> None:
        self._producer = producer
        self._topic_for = topic_for
        self.count = 0

    def send(self, record: Mapping[str, Any]) -> str:
        """Send one record built by :func:`dead_letter_record`; returns the dead-letter topic it went to."""
        target = self._topic_for(record["topic"])
        self._producer.send(target, value=encode("DeadLetter", record), key=record["original_key"])
        self.count += 1
        return target

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout=timeout)
