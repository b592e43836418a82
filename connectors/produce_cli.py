"""``privstream produce``: synthetic (``--generator``) or file (``--file`` CSV/JSONL) events to a topic.

Examples::

    privstream produce --bootstrap 127.0.0.1:9092 --generator zipf --count 1000000 --batch 1000
    privstream produce --bootstrap 127.0.0.1:9092 --generator gaussian --count 1e6 --users 1000 --key user
    privstream produce --bootstrap 127.0.0.1:9092 --file events.csv --rate 5000

CSV files have a header with ``item`` and optionally ``user_id`` and ``event_time`` (ms), or no header
and those columns in that order; JSONL lines are objects with the same keys. Items and user ids
that look like integers are sent as longs. Generator parameters (``--param universe=1000``) go to
:mod:`privstream.datagen`. Progress goes to stderr on long runs; an ``EndMarker`` ends every partition
unless ``--no-end-marker``.

``--punctuate-every 10s`` feeds jobs with time epochs (``privstream run heavy-hitters --epoch 10s``),
which start and close epochs only on ``EpochWatermark`` punctuations, never on event times. The
ticks are a public schedule (:mod:`privstream.connectors.punctuation`): the multiples of the
duration covering a declared range — ``--punctuate-from``/``--punctuate-to`` (ms since the epoch),
required for ``--file``, and for ``--generator`` the span its rate and count fix before any event
exists. Events go out in event-time order (a file is read whole and sorted first) with each tick
written just before the first event at or after it, so no event is behind a tick and one
far-future event adds no punctuation. Use the job's epoch length (or a multiple of it).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

from privstream.connectors.clients import add_bootstrap_option, default_bootstrap

DEFAULT_BOOTSTRAP = default_bootstrap()  # kept for importers; the option comes from add_bootstrap_option


def configure(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_option(parser)
    parser.add_argument("--topic", default="events")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--generator", choices=("zipf", "gaussian", "normal", "exponential"))
    source.add_argument("--file", help="CSV or JSONL file of events")
    parser.add_argument(
        "--format", choices=("csv", "jsonl"), default=None, help="file format (default: by suffix)"
    )
    parser.add_argument(
        "--count",
        type=float,
        default=None,
        help="events (generator: required; file: the first N rows — a positional cut, so the job's "
        "guarantee is for the produced prefix, not the whole file)",
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--users", type=int, default=None, help="number of users (generator)")
    parser.add_argument(
        "--rate", type=float, default=None, help="events per second (paced); default: as fast as possible"
    )
    parser.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="generator parameter"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=1000,
        help="events per message, at most (1: one Event each; >1: EventBatch messages of one partition's "
        "events of each chunk; default %(default)s: the jobs read one message per Python call, so single "
        "events are ~15x slower)",
    )
    parser.add_argument(
        "--key",
        choices=("item", "user"),
        default="item",
        help="partition by a hash of the item (default) or of the user; never by position, which would break "
        "the job's neighbour relation",
    )
    parser.add_argument("--chunk", type=int, default=10_000, help="events per send step")
    parser.add_argument("--partitions", type=int, default=4, help="partitions if the topic must be created")
    parser.add_argument("--no-end-marker", action="store_true")
    parser.add_argument(
        "--punctuate-every",
        default=None,
        metavar="DURATION",
        help="event-time clock: EpochWatermarks to every partition at multiples of DURATION (use the "
        "job's --epoch, e.g. 10s); time-epoch jobs start and close epochs only on these",
    )
    for name, what in (("from", "first"), ("to", "end (exclusive) of the")):
        parser.add_argument(
            f"--punctuate-{name}",
            type=int,
            default=None,
            metavar="MS",
            help=f"{what} event time (ms since the epoch) the punctuation schedule covers; required "
            "with --file (a generator's span is known in advance)",
        )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    from privstream.connectors.ldp_produce_cli import add_ldp_arguments

    add_ldp_arguments(parser)


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _generator_params(pairs: list[str]) -> dict[str, int | float]:
    params: dict[str, int | float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"param: expected NAME=VALUE, got {pair!r}")
        try:
            params[name] = _number(value)
        except ValueError:
            raise ValueError(f"param {name}: expected a number, got {value!r}") from None
    return params


def _count(value: float | None, required: bool) -> int | None:
    if value is None:
        if required:
            raise ValueError("--count: required with --generator")
        return None
    if value < 0 or value != int(value):
        raise ValueError(f"--count: must be a non-negative integer, got {value:g}")
    return int(value)


def _generated_span(args: argparse.Namespace, count: int, start_ms: int) -> tuple[int, int]:
    """``[start, end)`` of the generated event times, from the rate and count alone (no event)."""
    last = 0 if args.rate is None or count == 0 else int((count - 1) * 1000 / args.rate)
    return start_ms, start_ms + last + 1


def _generated_chunks(
    args: argparse.Namespace, count: int, params: dict[str, Any], start_ms: int
) -> Iterator[Any]:
    import numpy as np

    from privstream.datagen import generate_events

    for index, begin in enumerate(range(0, count, args.chunk)):
        size = min(args.chunk, count - begin)
        seed = (
            None
            if args.seed is None
            else int(np.random.SeedSequence([args.seed, index]).generate_state(1)[0])
        )
        offset_ms = 0 if args.rate is None else int(begin * 1000 / args.rate)
        yield generate_events(
            args.generator,
            size,
            seed=seed,
            num_users=args.users,
            rate=args.rate,
            start_time_ms=start_ms + offset_ms,
            **params,
        )


def _parse_scalar(text: Any) -> Any:
    if isinstance(text, str):
        stripped = text.strip()
        if stripped.lstrip("-").isdigit():
            return int(stripped)
        return stripped if stripped else None
    return text


#: the longest item or user id (characters) a file may hold, in CSV (csv's own field limit) and in
#: JSONL alike: an item is an identifier, and a message must stay under the producer's 1 MB limit
MAX_FIELD_CHARS = 131_072


class FileLineError(ValueError):
    """A line of ``--file`` that cannot be read: the message names the file and the line."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"--file {path}: line {line}: {reason}")


class _Lines:
    """The lines of a binary file decoded as UTF-8 (a bad byte raises :class:`FileLineError` with its
    line); ``number`` is the line last read."""

    def __init__(self, path: str, handle: BinaryIO) -> None:
        self.path, self._handle, self.number = path, handle, 0

    def __iter__(self) -> Iterator[str]:
        for raw in self._handle:
            self.number += 1
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self.error(
                    f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8 (save the file as UTF-8)"
                ) from None

    def error(self, reason: str) -> FileLineError:
        return FileLineError(self.path, self.number, reason)


def _checked(lines: _Lines, item: Any, user: Any, event_time: Any) -> tuple[Any, Any, Any]:
    for name, value in (("item", item), ("user_id", user)):
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            raise lines.error(
                f"{name} has {len(value):,} characters, more than {MAX_FIELD_CHARS:,} (an identifier, not a document)"
            )
    return item, user, event_time


def _file_rows(path: str, fmt: str) -> Iterator[tuple[Any, Any, Any]]:
    """``(item, user_id, event_time)`` of each row; a row that cannot be read raises
    :class:`FileLineError` naming the file and the line (never a bare codec or csv traceback)."""
    import csv
    import json

    with open(path, "rb") as handle:
        lines = _Lines(path, handle)
        if fmt == "jsonl":
            for line in lines:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise lines.error(f"not JSON ({getattr(exc, 'msg', exc)})") from None
                if not isinstance(row, dict) or "item" not in row:
                    raise lines.error("expected a JSON object with an 'item'")
                yield _checked(lines, row["item"], row.get("user_id"), row.get("event_time"))
            return
        reader = csv.reader(lines)
        try:
            header = next(reader, None)
            if header is None:
                return
            names = [h.strip() for h in header]
            if "item" in names:
                positions = [
                    names.index(n) if n in names else None for n in ("item", "user_id", "event_time")
                ]
                rows: Iterator[list[str]] = reader
            else:
                positions = [0, 1 if len(names) > 1 else None, 2 if len(names) > 2 else None]
                rows = iter([header, *reader])
            for row in rows:
                if row:
                    item, user, event_time = (
                        _parse_scalar(row[p]) if p is not None and p < len(row) else None for p in positions
                    )
                    yield _checked(lines, item, user, event_time)
        except csv.Error as exc:  # e.g. "field larger than field limit (131072)"
            raise lines.error(f"not valid CSV: {exc}") from None


def _file_chunks(args: argparse.Namespace, limit: int | None, sort: bool) -> Iterator[Any]:
    """The file's events in chunks of ``--chunk``; with ``sort``, read whole and sorted by event time."""
    from privstream.connectors.consume import columns_from_events
    from privstream.connectors.punctuation import slice_columns, sort_by_time

    fmt = args.format or ("jsonl" if args.file.endswith((".jsonl", ".json", ".ndjson")) else "csv")
    now = int(time.time() * 1000)
    step = None if sort else args.chunk
    items: list[Any] = []
    users: list[Any] = []
    times: list[int] = []
    for n, (item, user, event_time) in enumerate(_file_rows(args.file, fmt)):
        if limit is not None and n >= limit:
            break
        items.append(item)
        users.append(user)
        times.append(now if event_time is None else int(event_time))
        if len(items) == step:
            yield columns_from_events(items, users, times)
            items, users, times = [], [], []
    if not items:
        return
    columns = columns_from_events(items, users, times)
    if not sort:
        yield columns
        return
    columns = sort_by_time(columns)
    for begin in range(0, len(columns), args.chunk):
        yield slice_columns(columns, begin, min(begin + args.chunk, len(columns)))


def run(args: argparse.Namespace) -> int:
    from kafka.errors import MessageSizeTooLargeError
    from privstream.connectors.clients import BrokerUnreachable

    try:
        return _produce(args)
    except (BrokerUnreachable, ValueError, TypeError, OSError) as exc:
        print(f"privstream produce: error: {exc}", file=sys.stderr)
    except MessageSizeTooLargeError as exc:
        print(
            f"privstream produce: error: a message is too large to send ({exc}); send fewer events per "
            "message (--batch) or shorter items",
            file=sys.stderr,
        )
    return 2


def _produce(args: argparse.Namespace) -> int:
    from privstream.connectors.produce import EventProducer
    from privstream.connectors.topics import TopicSpec, create_topics

    from privstream.validation import check_int

    check_int("--batch", args.batch, type_error=ValueError)
    if args.generator and args.key == "user" and args.users is None:
        raise ValueError("--users: --key user needs user ids, which --generator makes only with --users N")
    check_int("--chunk", args.chunk, type_error=ValueError)
    if args.rate is not None and args.rate <= 0:
        raise ValueError(f"--rate: must be > 0, got {args.rate}")
    from privstream.connectors.validation import parse_duration_ms

    every_ms = (
        None if args.punctuate_every is None else parse_duration_ms(args.punctuate_every, "--punctuate-every")
    )
    if every_ms is not None and every_ms < 1:
        raise ValueError(f"--punctuate-every: must be > 0, got {args.punctuate_every!r}")
    start_ms = int(time.time() * 1000)
    span: tuple[int | None, int | None] = (args.punctuate_from, args.punctuate_to)
    if args.generator:
        count = _count(args.count, required=True)
        params = _generator_params(args.param)
        from privstream.datagen import generate_events

        generate_events(
            args.generator, 1, seed=args.seed, num_users=args.users, rate=args.rate, **params
        )  # fail fast
        if args.ldp:
            from privstream.connectors.ldp_produce_cli import produce_ldp

            return produce_ldp(args, params, count or 0)
        chunks = _generated_chunks(args, count, params, start_ms)
        total: int | None = count
        generated = _generated_span(args, count or 1, start_ms)
        span = (generated[0] if span[0] is None else span[0], generated[1] if span[1] is None else span[1])
    elif args.ldp:
        raise ValueError("--ldp: only with --generator (file items would need a declared domain)")
    else:
        total = _count(args.count, required=False)
        if every_ms is not None:
            for name, value in zip(("--punctuate-from", "--punctuate-to"), span, strict=True):
                if value is None:
                    raise ValueError(
                        f"{name}: required with --file and --punctuate-every (the punctuation schedule "
                        "must be declared, never taken from the events' times)"
                    )
        chunks = _file_chunks(args, total, sort=every_ms is not None)
    schedule_args = None if every_ms is None else (every_ms, int(span[0]), int(span[1]))  # type: ignore[arg-type]
    if schedule_args is not None:
        from privstream.connectors.punctuation import PunctuationSchedule, schedule_ticks

        schedule_ticks(*schedule_args)  # fail fast on the range, before connecting
    create_topics(args.bootstrap, [TopicSpec(args.topic, args.partitions)])
    started = time.monotonic()
    last_report = started
    sent = 0
    with EventProducer(
        args.bootstrap, args.topic, events_per_message=args.batch, key_by=args.key
    ) as producer:
        schedule = None if schedule_args is None else PunctuationSchedule(producer, *schedule_args)
        for columns in chunks:
            sent += producer.send_columns(columns) if schedule is None else schedule.send(columns)
            if args.rate is not None:
                delay = started + sent / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            now = time.monotonic()
            if not args.quiet and now - last_report >= 1.0:
                last_report = now
                of = f"/{total}" if total else ""
                print(
                    f"produced {sent}{of} events, {sent / (now - started):,.0f} events/s",
                    file=sys.stderr,
                    flush=True,
                )
        if schedule is not None:
            schedule.end()
        if args.no_end_marker:
            producer.flush()
        else:
            producer.finish()
    elapsed = time.monotonic() - started
    print(
        f"produced {sent} events in {producer.messages_sent} messages to {args.topic!r} on {args.bootstrap} "
        f"in {elapsed:.2f} s",
        file=sys.stderr,
    )
    return 0
