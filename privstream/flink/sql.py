"""Private top items per tumbling event-time window for Table API / SQL users.

:func:`private_top_items` reads a table or SQL query (columns, by position: the item, the user — or
NULL —, the event time as BIGINT milliseconds or a TIMESTAMP), runs
:func:`~privstream.flink.private_heavy_hitters` over it with time epochs of ``window_ms`` on the
declared ``schedule`` and registers the releases as a temporary view that SQL can query::

    SELECT window_start, window_end, item, noisy_count, guarantee FROM top_clicks

One row per released item, and one row with ``item`` NULL for a window that released no item or
was refused, so every window of the schedule appears: which windows are released depends only on
the public schedule, never on the data. (A ``TUMBLE`` window aggregation emits only windows that
hold an event, so whether a window appears would reveal whether any event fell into it; that is why
this is a bridge through the DataStream operator and not a window aggregate.)

Relation: add or remove one event (the event-level privacy unit; with ``m`` a user's set), under
the assumption that the event-time column is trusted: an event's window is decided by its own
timestamp (Lebeda–Tětek's disjoint epochs compose in parallel, so each window's release costs the
(ε, δ) of one); the ``guarantee`` column states it row by row. Events outside the schedule or late
by the operator's clock are rejected, not counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pyflink.common import Row, Types
from pyflink.table import StreamTableEnvironment, Table

from privstream.flink.heavy_hitters import InMemoryLedger, KafkaLedger, private_heavy_hitters
from privstream.flink.streams import PICKLED, check_argument, is_int
from privstream.operators.epochs import TimeEpochs
from privstream.operators.release_logic import ReleaseRefusal

#: the view's columns
COLUMNS = (
    ("window_start", Types.LONG()),  # ms since the epoch, inclusive
    ("window_end", Types.LONG()),  # ms, exclusive
    ("epoch", Types.LONG()),
    ("item", Types.STRING()),  # NULL: the window released no item (or was refused)
    ("noisy_count", Types.LONG()),
    ("epsilon", Types.DOUBLE()),
    ("delta", Types.DOUBLE()),
    ("mechanism", Types.STRING()),
    ("guarantee", Types.STRING()),  # the release's privacy statement, or why it was refused
)
ROW = Types.ROW_NAMED([name for name, _ in COLUMNS], [kind for _, kind in COLUMNS])


def _event(row: Row) -> tuple[Any, Any, int]:
    """A source row (item, user, event time) as the operator's ``(item, user, event_time_ms)``."""
    item, user, when = row[0], row[1], row[2]
    if isinstance(when, datetime):  # TIMESTAMP_LTZ: aware; TIMESTAMP: naive, read as UTC
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        when = int(when.timestamp() * 1000)
    return item, user, when


class _Rows:
    """A release (or refusal) → the view's rows; ``window_ms`` gives each epoch's window."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms

    def __call__(self, release: Any) -> Iterator[Row]:
        start = release.epoch * self.window_ms
        end = start + self.window_ms
        if isinstance(release, ReleaseRefusal):
            yield Row(start, end, release.epoch, None, None, release.epsilon_requested,
                      release.delta_requested, None, f"refused: {release.reason}: {release.detail}")  # fmt: skip
            return
        statement = release.statement
        if not release.items:
            yield Row(
                start,
                end,
                release.epoch,
                None,
                None,
                release.epsilon,
                release.delta,
                release.mechanism,
                statement,
            )
        for item, count in release.items:
            yield Row(start, end, release.epoch, str(item), int(count), release.epsilon, release.delta,
                      release.mechanism, statement)  # fmt: skip


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
    check_argument("view", view, isinstance(view, str) and view.isidentifier(), "a view name (an identifier)")
    check_argument("window_ms", window_ms, is_int(window_ms) and window_ms >= 1, "an int >= 1 (ms)")
    table = t_env.sql_query(source) if isinstance(source, str) else source
    columns = table.get_schema().get_field_names()
    check_argument("source", columns, len(columns) == 3, "3 columns: item, user (or NULL), event time")
    events = t_env.to_data_stream(table).map(_event, output_type=PICKLED).name("privstream: source rows")
    out = private_heavy_hitters(
        events, epsilon=epsilon, delta=delta, k=k, epochs=TimeEpochs(window_ms), schedule=schedule,
        ledger=ledger, shards=shards, release_mode=release_mode, mechanism=mechanism, name=f"sql-{view}",
    )  # fmt: skip
    rows = out.releases.flat_map(_Rows(window_ms), output_type=ROW).name(f"privstream: {view} rows")
    result = t_env.from_data_stream(rows)
    t_env.create_temporary_view(view, result)
    return result
