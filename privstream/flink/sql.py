"""Private top items per tumbling event-time window for Table API / SQL users.

:func:`private_top_items` reads a table or SQL query (columns, by position: the item — BIGINT, INT
or STRING —, the user — any type, or NULL; not used —, the event time — BIGINT milliseconds,
TIMESTAMP (read as UTC) or TIMESTAMP_LTZ), runs :func:`~privstream.flink.private_heavy_hitters`
over it with time epochs of ``window_ms`` on the declared ``schedule`` (both ends multiples of
``window_ms``) and registers the releases as a temporary view that SQL can query::

    SELECT window_start, window_end, status, item, noisy_count, guarantee FROM top_clicks

One row per released item (``status`` 'released'), one row with ``item`` NULL for a window that
released no item ('empty') or whose release the ledger refused ('refused'), so every window of the
schedule appears: which windows are released depends only on the public schedule, never on the
data. (A ``TUMBLE`` window aggregation emits only windows that hold an event, so whether a window
appears would reveal whether any event fell into it; that is why this is a bridge through the
DataStream operator and not a window aggregate.) The source must be bounded: the windows of the
schedule are released when the input ends.

Relation (the ``guarantee`` column, row by row): add or remove one row of the source query's
result, each row's window decided by its own event time, which is trusted; the windows of the
schedule are disjoint, so they compose in parallel (each costs the (ε, δ) of one release). The unit
is one row: a user with c rows in a window is protected at c·ε, and a source query that joins,
unnests or otherwise turns one underlying record into several rows multiplies the cost. A row whose
time falls outside the schedule is in no released window (before it: rejected as late; after it: in
a window that is never released).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pyflink.common import Row, Types
from pyflink.common.time import Instant
from pyflink.table import StreamTableEnvironment, Table

from privstream.flink.heavy_hitters import InMemoryLedger, KafkaLedger, private_heavy_hitters
from privstream.flink.streams import PICKLED, check_argument, is_int
from privstream.operators.epochs import TimeEpochs
from privstream.operators.kafka_io import planned_on_this_thread
from privstream.operators.release_logic import ReleaseRefusal

#: the view's columns
COLUMNS = (
    ("window_start", Types.LONG()),  # ms since the epoch (UTC), inclusive
    ("window_end", Types.LONG()),  # ms, exclusive
    ("epoch", Types.LONG()),
    ("status", Types.STRING()),  # released, empty (nothing above the threshold) or refused (budget)
    ("item", Types.STRING()),  # NULL when empty or refused
    ("noisy_count", Types.LONG()),
    ("epsilon", Types.DOUBLE()),
    ("delta", Types.DOUBLE()),
    ("mechanism", Types.STRING()),
    ("guarantee", Types.STRING()),  # the privacy statement (GUARANTEE), or why it was refused
)
#: the ``guarantee`` column of a released or empty window
GUARANTEE = (
    "(ε={epsilon:g}, δ={delta:g})-DP for this window ({mechanism}); unit: one row of the source query "
    "(a query that turns one record into several rows multiplies the cost); relation: add or remove "
    "one row, its window decided by its own event time (trusted); windows of {window_ms} ms on the "
    "declared schedule [{start}, {end}) ms are disjoint and compose in parallel"
)
#: the source columns' SQL types this form reads
ITEM_TYPES = ("BIGINT", "INT", "SMALLINT", "TINYINT", "VARCHAR", "CHAR")
TIME_TYPES = ("BIGINT", "TIMESTAMP", "TIMESTAMP_LTZ", "TIMESTAMP_WITH_LOCAL_TIME_ZONE")
ROW = Types.ROW_NAMED([name for name, _ in COLUMNS], [kind for _, kind in COLUMNS])


def _event(row: Row) -> tuple[Any, None, int]:
    """A source row (item, user, event time) as the operator's ``(item, None, event_time_ms)``: the
    user is not used (the unit is one row)."""
    item, when = row[0], row[2]
    if isinstance(when, Instant):  # TIMESTAMP_LTZ
        when = when.to_epoch_milli()
    elif isinstance(when, datetime):  # TIMESTAMP: naive, read as UTC
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        when = int(when.timestamp() * 1000)
    return item, None, when


class _Rows:
    """A release (or refusal) → the view's rows; ``window_ms`` gives each epoch's window."""

    def __init__(self, window_ms: int, schedule: tuple[int, int]) -> None:
        self.window_ms, self.schedule = window_ms, schedule

    def __call__(self, release: Any) -> Iterator[Row]:
        start = release.epoch * self.window_ms
        end = start + self.window_ms
        if isinstance(release, ReleaseRefusal):
            yield Row(start, end, release.epoch, "refused", None, None, 0.0, 0.0, None,
                      f"refused, nothing released or charged: {release.reason}: {release.detail}")  # fmt: skip
            return
        guarantee = GUARANTEE.format(
            epsilon=release.epsilon, delta=release.delta, mechanism=release.mechanism,
            window_ms=self.window_ms, start=self.schedule[0], end=self.schedule[1],
        )  # fmt: skip
        if not release.items:
            yield Row(start, end, release.epoch, "empty", None, None, release.epsilon, release.delta,
                      release.mechanism, guarantee)  # fmt: skip
        for item, count in release.items:
            yield Row(start, end, release.epoch, "released", str(item), int(count), release.epsilon,
                      release.delta, release.mechanism, guarantee)  # fmt: skip


def _type_name(data_type: Any) -> str:
    """A column's SQL type name without its parameters (``TIMESTAMP(3)`` → ``TIMESTAMP``)."""
    return str(data_type).split("(")[0].replace(" NOT NULL", "").strip()


def private_top_items(
    t_env: StreamTableEnvironment,
    source: str | Table,
    *,
    view: str,
    epsilon: float,
    delta: float,
    k: int,
    window_ms: int,
    schedule: tuple[int, int],
    ledger: InMemoryLedger | KafkaLedger,
    shards: int = 1,
    release_mode: str | None = None,
    mechanism: str = "auto",
) -> Table:
    """Register ``view``: the private top items of ``source`` (a ``Table`` or a SQL query) per
    tumbling window of ``window_ms`` over ``schedule = (start_ms, end_ms)`` (module docstring);
    returns the view's table. ``epsilon``/``delta``: each window's release; the other arguments as
    for :func:`~privstream.flink.private_heavy_hitters`, which checks them, naming the argument."""
    check_argument("t_env", t_env, isinstance(t_env, StreamTableEnvironment), "a StreamTableEnvironment")
    check_argument("source", source, isinstance(source, str | Table), "a Table or a SQL query")
    check_argument(
        "view", view, isinstance(view, str) and view.isidentifier() and view.isascii(), "a view name"
    )
    check_argument("window_ms", window_ms, is_int(window_ms) and window_ms >= 1, "an int >= 1 (ms)")
    check_argument(
        "schedule", schedule,
        isinstance(schedule, tuple) and len(schedule) == 2 and all(is_int(t) for t in schedule)
        and schedule[0] < schedule[1] and all(t % window_ms == 0 for t in schedule),
        f"(start_ms, end_ms) ints, start < end, both multiples of window_ms={window_ms}",
    )  # fmt: skip
    table = t_env.sql_query(source) if isinstance(source, str) else source
    types = [_type_name(t) for t in table.get_resolved_schema().get_column_data_types()]
    check_argument("source", types, len(types) == 3, "3 columns: item, user (or NULL), event time")
    check_argument("source", types[0], types[0] in ITEM_TYPES, f"an item column of {'/'.join(ITEM_TYPES)}")
    check_argument(
        "source", types[2], types[2] in TIME_TYPES, f"an event-time column of {'/'.join(TIME_TYPES)}"
    )
    # planned through the guard the jobs' source uses: a py4j gateway thread the environment was
    # not created on lacks Calcite's metadata provider (an intermittent NullPointerException)
    stream = planned_on_this_thread(lambda: t_env.to_data_stream(table), kafka=False)
    events = stream.map(_event, output_type=PICKLED).name("privstream: source rows")
    out = private_heavy_hitters(
        events, epsilon=epsilon, delta=delta, k=k, epochs=TimeEpochs(window_ms), schedule=schedule,
        ledger=ledger, shards=shards, release_mode=release_mode, mechanism=mechanism, name=f"sql-{view}",
    )  # fmt: skip
    rows = out.releases.flat_map(_Rows(window_ms, schedule), output_type=ROW).name(f"privstream: {view} rows")
    result = t_env.from_data_stream(rows)
    t_env.create_temporary_view(view, result)
    return result
