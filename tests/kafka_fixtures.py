"""Kafka fixtures: the embedded tansu broker on loopback (one per test session) and unique topics."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.topics import TopicSpec, create_topics, dead_letter_topic


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    """The in-memory embedded broker, shared by the whole session; ``.bootstrap`` is ``127.0.0.1:PORT``."""
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def unique_topic(kafka_broker: EmbeddedBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``unique_topic(prefix="t", partitions=1, compacted=False)`` creates a fresh topic (and its ``-dlq``)
    named after the test, so tests never see each other's messages."""

    def make(prefix: str = "t", partitions: int = 1, compacted: bool = False) -> str:
        test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60].strip("-")
        name = f"{prefix}-{test}-{uuid.uuid4().hex[:8]}"
        create_topics(
            kafka_broker.bootstrap,
            [TopicSpec(name, partitions, compacted=compacted), TopicSpec(dead_letter_topic(name), 1)],
        )
        return name

    return make
