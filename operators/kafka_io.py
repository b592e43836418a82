"""Kafka endpoints of the jobs: Flink's own KafkaSource (via the Table API) and KafkaSinks.

Source: a Table API ``kafka`` table with the ``raw`` format exposes each record's value bytes
together with its ``partition`` and ``offset`` metadata (the DataStream ``KafkaSource`` builder in
PyFlink only offers value-only deserialisers, which would lose the partition = shard). It is the
same FLIP-27 ``KafkaSource`` underneath, so offsets live in Flink checkpoints (exactly once). The
source is unbounded unless explicit stopping offsets are given (tansu answers ListOffsets(latest)
wrongly, so a ``latest`` bound is never used).

Sinks: value bytes (dead letters, releases) or ``Row(key, value)`` (the compacted ledger topic),
with ``DeliveryGuarantee.EXACTLY_ONCE`` (Kafka transactions committed on checkpoints); readers must
use ``isolation.level=read_committed``. :func:`stamped` sets the submission's run id in every record
on its way to a sink (:func:`privstream.connectors.run_ids.stamp`).
"""

from __future__ import annotations

import logging
from typing import Any

from privstream.connectors.validation import sql_option_value
from pyflink.common import Types
from pyflink.common.serialization import ByteArraySchema, RowFieldExtractorSchema
from pyflink.datastream import DataStream, MapFunction
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink
from pyflink.table import StreamTableEnvironment

logger = logging.getLogger(__name__)

BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())
KEYED_BYTES = Types.ROW_NAMED(["key", "value"], [BYTES, BYTES])
#: Rows the source yields: (value bytes or None, partition, offset).
SOURCE_ROW = Types.ROW_NAMED(["payload", "part", "off"], [BYTES, Types.INT(), Types.LONG()])


def events_source(
    t_env: StreamTableEnvironment,
    *,
    bootstrap: str,
    topic: str,
    group_id: str,
    stop_offsets: dict[int, int] | None = None,
    table: str = "privstream_events",
    shards: int | None = None,
) -> DataStream:
    """Rows ``(payload, part, off)`` from ``topic`` starting at the earliest offset (``table``: the
    temporary table's name; one per source of a job).

    ``shards``: the rows keyed by their partition's routing key (partition p = shard p,
    :func:`~privstream.operators.shard_keys.shard_keys`), for
    :func:`~privstream.operators.shard_keys.process_by_shard`. The key is computed by the source's
    SQL query and the stream keyed by Flink's own key selector, all in the JVM: a Python key selector
    (``key_by(lambda …)``) would add a Python operator at the source's parallelism (1) that every
    event passes through before the exchange. A partition outside ``0 … shards − 1`` (one added
    after the job started) gets key −1, which the shard operator refuses loudly."""
    options = {
        "connector": "kafka",
        "topic": sql_option_value(topic, "topic"),
        "properties.bootstrap.servers": sql_option_value(bootstrap, "bootstrap"),
        "properties.group.id": sql_option_value(group_id, "group_id"),
        "properties.isolation.level": "read_committed",
        "scan.startup.mode": "earliest-offset",
        "format": "raw",
    }
    if stop_offsets:
        options["scan.bounded.mode"] = "specific-offsets"
        options["scan.bounded.specific-offsets"] = ";".join(
            f"partition:{p},offset:{o}" for p, o in sorted(stop_offsets.items())
        )
    with_clause = ",\n".join(f"'{k}' = '{v}'" for k, v in options.items())
    t_env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {table}")
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE {table} (payload BYTES, part INT METADATA FROM 'partition' VIRTUAL, "
        f"off BIGINT METADATA FROM 'offset' VIRTUAL) WITH ({with_clause})"
    )
    # a SQL query (not from_path): its conversion sets the planner's per-thread metadata provider
    # on the gateway thread that serves it (see planned_on_this_thread)
    if shards is None:
        return planned_on_this_thread(lambda: t_env.to_data_stream(t_env.sql_query(f"SELECT * FROM {table}")))
    return _keyed_by_partition(t_env, table, shards)


def _keyed_by_partition(t_env: StreamTableEnvironment, table: str, shards: int) -> Any:
    """:func:`events_source`'s keyed form: ``SELECT <routing key of part> AS k, ROW(payload, part,
    off) AS v`` as ``Row(k, v)`` (a ``RowTypeInfo``, which PyFlink's keyed operators take), keyed by
    field 0 with PyFlink's own ``KeyByKeySelector`` and key type ``ROW<INT>`` exactly as
    ``DataStream.key_by`` keys its ``Row(key, value)``, so the keys' key groups, the state's key
    serializer and the keyed function's ``value`` (``v``) are what ``key_by`` gives."""
    from privstream.operators.shard_keys import shard_keys
    from pyflink.datastream.data_stream import KeyedStream
    from pyflink.java_gateway import get_gateway

    cases = " ".join(f"WHEN {p} THEN {key}" for p, key in enumerate(shard_keys(shards)))
    query = f"SELECT CASE part {cases} ELSE -1 END AS k, ROW(payload, part, off) AS v FROM {table}"
    with_key = Types.ROW([Types.INT(), SOURCE_ROW])
    rows = planned_on_this_thread(lambda: t_env.to_append_stream(t_env.sql_query(query), with_key))
    selector = get_gateway().jvm.org.apache.flink.streaming.api.functions.python.KeyByKeySelector()
    j_keyed = rows._j_data_stream.keyBy(selector, Types.ROW([Types.INT()]).get_java_type_info())
    return KeyedStream(j_keyed, SOURCE_ROW, rows)


#: Errors of a plan served by a py4j gateway thread the environment was not set up on.
_OTHER_THREAD_ERRORS = (
    "Could not find any factory for identifier 'kafka'",  # the connector jars' class loader
    "NullPointerException: metadataHandlerProvider",  # Calcite's per-thread metadata provider
)


def planned_on_this_thread(plan: Any, *, kafka: bool = True) -> Any:
    """Run ``plan`` (which discovers the Kafka table factory and optimises the source's query) on
    whichever py4j gateway thread serves it. A later call can be served by another gateway thread
    than the environment's creation (py4j opens a connection per concurrent call, e.g. a
    finalizer's), which lacks two per-thread settings, both seen intermittently under load:
    the connector jars on its context class loader ("Could not find any factory for identifier
    'kafka'"; PyFlink puts ``pipeline.jars`` on the creating thread's loader) and Calcite's
    metadata provider (``NullPointerException: metadataHandlerProvider``; set by a SQL query's
    conversion on the thread that converts it, as Flink's SQL gateway re-sets it per call). The
    jars are added just before; on either error both are set up again and the plan runs once more
    (a failed plan registers nothing). ``kafka=False``: a plan without the Kafka connector (the SQL
    operator over a user's own tables): no jars, the same retry."""
    from privstream.connectors.flink_jars import connector_jar_urls
    from pyflink.util.java_utils import add_jars_to_context_class_loader

    jars = connector_jar_urls() if kafka else []
    if jars:
        add_jars_to_context_class_loader(jars)
    try:
        return plan()
    except Exception as exc:  # py4j's Py4JJavaError
        if not any(error in str(exc) for error in _OTHER_THREAD_ERRORS):
            raise
        logger.warning("planning on another py4j gateway thread failed; retried once: %s", str(exc)[:200])
        if jars:
            add_jars_to_context_class_loader(jars)
        return plan()


def kafka_sink(
    *,
    bootstrap: str,
    topic: str,
    transactional_id_prefix: str,
    keyed: bool = False,
    exactly_once: bool = True,
) -> KafkaSink:
    """A sink for byte values (or ``Row(key, value)`` with ``keyed``)."""
    serializer = KafkaRecordSerializationSchema.builder().set_topic(topic)
    if keyed:
        serializer = serializer.set_key_serialization_schema(
            RowFieldExtractorSchema(0)
        ).set_value_serialization_schema(RowFieldExtractorSchema(1))
    else:
        serializer = serializer.set_value_serialization_schema(ByteArraySchema())
    guarantee = DeliveryGuarantee.EXACTLY_ONCE if exactly_once else DeliveryGuarantee.AT_LEAST_ONCE
    return (
        KafkaSink.builder()
        .set_bootstrap_servers(bootstrap)
        .set_record_serializer(serializer.build())
        .set_delivery_guarantee(guarantee)
        .set_transactional_id_prefix(transactional_id_prefix)
        .set_property("transaction.timeout.ms", "600000")
        .build()
    )


class StampRunId(MapFunction):
    """Sets ``run_id`` in every record that has the field (:func:`~privstream.connectors.run_ids.stamp`);
    the id comes from the launcher through the job graph, so a replay writes the same bytes."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def map(self, value: bytes) -> bytes:
        from privstream.connectors.run_ids import stamp

        return stamp(bytes(value), self.run_id)


def stamped(stream: DataStream, run_id: str | None, what: str) -> DataStream:
    """``stream`` (Avro message bytes) with ``run_id`` stamped into its records (``what`` names the
    operator: ``stamp-run-id-<what>``); ``stream`` itself when ``run_id`` is None."""
    if run_id is None:
        return stream
    return (
        stream.map(StampRunId(run_id), output_type=BYTES)
        .uid(f"stamp-run-id-{what}")
        .name(f"run id ({what})")
        .set_parallelism(1)  # as the sinks
    )
