"""Topic names and admin helpers.

Default topics: ``events`` (raw events, Avro ``Event``/``EventBatch``/``UserSetEvent``, punctuation
``EpochWatermark``, ``EndMarker``), ``events-dlq`` (``DeadLetter``), ``releases`` (``Release``,
``ReleaseRefused``), ``ledger`` (``LedgerEntry``, log-compacted: the latest entry per ledger id is
the state; ``LedgerFence`` start-up fences keyed ``<ledger id>/fence``) and ``ldp-reports``
(``LdpReport``). Dead letters of topic ``t`` go to ``t-dlq``. (tansu accepts ``cleanup.policy=compact`` but does not compact; Apache Kafka does.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from privstream.connectors.clients import kafka_admin

from privstream.validation import check_int

EVENTS = "events"
EVENTS_DLQ = "events-dlq"
RELEASES = "releases"
LEDGER = "ledger"
LDP_REPORTS = "ldp-reports"


def dead_letter_topic(topic: str) -> str:
    """Where undecodable messages of ``topic`` go: ``<topic>-dlq``."""
    return f"{topic}-dlq"


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partition count, whether it is log-compacted, extra configs."""

    name: str
    partitions: int = 1
    compacted: bool = False
    config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > 249:
            raise ValueError(f"name: a topic name must be a non-empty str of <= 249 chars, got {self.name!r}")
        check_int("partitions", self.partitions, allow_numpy=True, type_error=ValueError)

    def configs(self) -> dict[str, str]:
        out = dict(self.config)
        if self.compacted:
            out["cleanup.policy"] = "compact"
        return out


def default_topics(partitions: int = 4) -> tuple[TopicSpec, ...]:
    """The standard topic set; ``partitions`` for the two high-volume input topics."""
    return (
        TopicSpec(EVENTS, partitions),
        TopicSpec(EVENTS_DLQ, 1),
        TopicSpec(RELEASES, 1),
        TopicSpec(LEDGER, 1, compacted=True),
        TopicSpec(LDP_REPORTS, partitions),
        TopicSpec(dead_letter_topic(LDP_REPORTS), 1),
    )


def list_topics(bootstrap: str) -> set[str]:
    admin = kafka_admin(bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def create_topics(bootstrap: str, specs: Iterable[TopicSpec]) -> list[str]:
    """Create the topics that do not exist yet; returns the names created (existing ones are left alone)."""
    from kafka.admin import NewTopic

    specs = list(specs)
    admin = kafka_admin(bootstrap)
    try:
        existing = set(admin.list_topics())
        new = [spec for spec in specs if spec.name not in existing]
        if new:
            admin.create_topics(
                [NewTopic(spec.name, spec.partitions, 1, topic_configs=spec.configs()) for spec in new]
            )
        return [spec.name for spec in new]
    finally:
        admin.close()


def ensure_default_topics(bootstrap: str, partitions: int = 4) -> list[str]:
    """Create any missing default topic; returns the names created."""
    return create_topics(bootstrap, default_topics(partitions))
