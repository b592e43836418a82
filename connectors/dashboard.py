"""``privstream dashboard``: a local web page of a job's latest releases and its ledger, live.

Serves ``http://HOST:PORT/`` (default ``127.0.0.1:8050``) showing

- the latest release as a bar chart of its noisy counts with the release's stated error bars (the
  ``ErrorBound`` the ``Release`` record carries: with probability >= 1 - beta the true count lies in
  ``[count - above, count + below + S]``; the data-dependent sketch term S, e.g. ``n/(k+1)``, is
  not public and is named, not drawn), a table of its items and a list of the recent releases
  (click one to show it);
- its guarantee: ε, δ, mechanism, neighbour relation and privacy unit;
- every ledger's budget spent over time (the running totals of the ``LedgerEntry`` records on the
  ledger topic) against its total;
- ``ReleaseRefused`` records (an exhausted budget), sliding-window ``WindowRelease`` records and
  the LDP server's ``LdpRelease`` records (their estimates, without error bars: neither record
  states a bound, only its theorem or scheme).

Two background threads read the release and ledger topics from their beginning with
``read_committed`` (:func:`privstream.connectors.consume.committed_reader`) and keep the latest
``--keep`` releases and every ledger entry in memory (:class:`DashboardState`); the page polls
``/api/state`` once a second and redraws only when something new arrived. What a reader is doing
(waiting for the broker or a topic, reading, stopped) is shown on the page and, when it changes,
logged on the terminal. Ctrl-C stops the command with one line and exit status 130 (SIGTERM: 0). Everything the page
loads is served from this process: the chart library is plotly.js as shipped inside the ``plotly``
wheel (nothing is fetched from the internet). Needs the ``dashboard`` extra
(``pip install 'privstream[dashboard]'``).
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import logging
import math
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RELEASE_SCHEMAS = (
    "Release",
    "WindowRelease",
    "LdpRelease",
    "ReleaseRefused",
)  #: read from the releases topic
LEDGER_SCHEMAS = ("LedgerEntry",)  #: read from the ledger topic (fences and heartbeats are skipped)
STATIC = "dashboard_static"  #: package-data folder of the page (index.html, dashboard.js, dashboard.css)
MISSING_EXTRA = "the dashboard needs the 'dashboard' extra: pip install 'privstream[dashboard]'"


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``privstream dashboard`` options."""
    from privstream.connectors.clients import add_bootstrap_option
    from privstream.connectors.topics import LEDGER, RELEASES

    add_bootstrap_option(parser)
    parser.add_argument(
        "--topic",
        default=RELEASES,
        help=f"releases topic: Release, WindowRelease, LdpRelease, ReleaseRefused records (default "
        f"{RELEASES}; the sliding-window job writes window-releases, ldp-heavy-hitters ldp-releases)",
    )
    parser.add_argument(
        "--ledger-topic", default=LEDGER, help=f"ledger topic: LedgerEntry records (default {LEDGER})"
    )
    parser.add_argument(
        "--port", type=int, default=8050, help="HTTP port (default: %(default)s; 0: a free port)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default: loopback only)")
    parser.add_argument("--keep", type=int, default=50, help="releases kept in memory and listed")


# --- the state the page shows ----------------------------------------------------------------------


def _finite(value: Any) -> float | None:
    """A JSON-safe float: None for NaN and infinities (strict JSON has neither)."""
    number = float(value)
    return number if math.isfinite(number) else None


def _item_text(item: Any) -> str:
    return item if isinstance(item, str) else str(item)


def _error_bound(bound: Mapping[str, Any] | float | None) -> dict[str, Any] | None:
    """A decoded ``Release.error_bound`` as the page shows it: an ``ErrorBound`` record's fields, or
    for a ``Release.v1`` message's bare double a symmetric bound of that size."""
    if bound is None:
        return None
    if not isinstance(bound, Mapping):
        size = _finite(bound)
        return {
            "below": size,
            "above": size,
            "beta": None,
            "sketch_term": "",
            "systematic": 0.0,
            "derivation": "Release.v1: max(below, above) only",
        }
    return {
        "below": _finite(bound["below"]),
        "above": _finite(bound["above"]),
        "beta": _finite(bound["beta"]),
        "sketch_term": str(bound["sketch_term"]),
        "systematic": _finite(bound["systematic"]),
        "derivation": str(bound["derivation"]),
    }


def release_view(schema: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """One decoded ``Release``, ``WindowRelease``, ``LdpRelease`` or ``ReleaseRefused`` record as the
    page shows it:
    ``kind``, ``time`` (ms), a ``label``, ``items`` (item text, count, and for a ``Release`` the
    interval in which the true count lies by the stated bound, S aside), ``guarantee`` and
    ``error_bound``. Raises ``ValueError`` for another schema."""
    if schema == "Release":
        bound = _error_bound(value["error_bound"])
        above = (bound or {}).get("above")
        below = (bound or {}).get("below")
        items = [
            {
                "item": _item_text(entry["item"]),
                "count": int(entry["count"]),
                "low": None if above is None else entry["count"] - above,
                "high": None if below is None else entry["count"] + below,
            }
            for entry in value["items"]
        ]
        if value.get("epoch") is not None:
            label = f"epoch {value['epoch']}"
        else:
            label = f"window [{value.get('window_start')}, {value.get('window_end')})"
        return {
            "kind": "Release",
            "time": int(value["release_time"]),
            "label": label,
            "items": items,
            "error_bound": bound,
            "guarantee": {
                "epsilon": _finite(value["epsilon"]),
                "delta": _finite(value["delta"]),
                "mechanism": str(value["mechanism"]),
                "neighbour_relation": str(value["neighbour_relation"]),
                "privacy_unit": str(value["privacy_unit"]),
            },
        }
    if schema == "WindowRelease":
        heavy = {entry["item"] for entry in value["heavy_hitters"]}
        items = [
            {
                "item": _item_text(e["item"]),
                "count": int(e["estimate"]),
                "low": None,
                "high": None,
                "heavy": e["item"] in heavy,
            }
            for e in value["estimates"]
        ]
        end = value.get("window_end")
        end = value["position"] if end is None else end
        return {
            "kind": "WindowRelease",
            "time": int(value["release_time"]),
            "label": f"shard {value['shard']}/{value['shards']}, window [{value['window_start']}, {end}] "
            f"({value.get('windowing', 'count')})",
            "items": items,
            "error_bound": None,
            "guarantee": {
                "epsilon": _finite(value["epsilon"]),
                "delta": _finite(value["delta"]),
                "mechanism": f"DPSW-Sketch ({value['theorem']}; ρ={value['rho']:g} per shard, "
                f"{value['composition']})",
                "neighbour_relation": str(value["neighbour_relation"]),
                "privacy_unit": str(value["privacy_unit"]),
            },
        }
    if schema == "LdpRelease":
        return {
            "kind": "LdpRelease",
            "time": int(value["release_time"]),
            "label": f"{value['deployment']} epoch {value['epoch']} ({value['reports']} reports)",
            "items": [
                {
                    "item": _item_text(e["item"]),
                    "count": round(float(e["estimate"])),
                    "low": None,
                    "high": None,
                }
                for e in value["items"]
            ],
            "error_bound": None,
            "guarantee": {
                "epsilon": _finite(value["epsilon"]),
                "delta": _finite(value.get("delta", 0.0)),
                "mechanism": f"HG-LDP {value['scheme']} (local DP: every report randomised by its client; "
                f"{value.get('warm_up_items', 0)} public warm-up items not covered)",
                "neighbour_relation": str(value.get("neighbour_relation", "")),
                "privacy_unit": str(value["privacy_unit"]),
            },
        }
    if schema == "ReleaseRefused":
        epoch = value.get("epoch")
        return {
            "kind": "ReleaseRefused",
            "time": int(value["refused_time"]),
            "label": f"epoch {epoch} refused" if epoch is not None else "refused",
            "items": [],
            "error_bound": None,
            "guarantee": None,
            "reason": str(value["reason"]),
            "detail": str(value["detail"]),
        }
    raise ValueError(f"schema: the dashboard shows {RELEASE_SCHEMAS}, not {schema!r}")


def ledger_view(value: Mapping[str, Any]) -> dict[str, Any]:
    """One decoded ``LedgerEntry`` record's running totals, as the page shows them, with the
    ledger's composition from the chained entry it carries (which must agree with its display
    fields: :func:`privstream.connectors.ledger_topic.record_state`)."""
    from privstream.connectors.ledger_topic import record_state

    try:
        composition = record_state(value).composition
    except ValueError as exc:  # LedgerFormatError: shown, not hidden
        composition = f"unverified entry: {exc}"
    return {
        "composition": composition,
        "ledger_id": str(value["ledger_id"]),
        "sequence": int(value["sequence"]),
        "time": int(value["entry_time"]),
        "epsilon_spent": _finite(value["epsilon_spent"]),
        "delta_spent": _finite(value["delta_spent"]),
        "epsilon_total": _finite(value["epsilon_total"]),
        "delta_total": _finite(value["delta_total"]),
        "last_charge": str(value["last_charge"]),
    }


class DashboardState:
    """What the page shows, shared between the reader threads and the web server (thread-safe):
    the latest ``keep`` releases in release-time order, every ledger entry, and each reader's status.
    ``version`` grows with every change, so a poll with the version it has gets nothing new."""

    def __init__(self, keep: int = 50) -> None:
        if keep < 1:
            raise ValueError(f"keep: must be >= 1, got {keep}")
        self.keep = keep
        self._lock = threading.Lock()
        self._releases: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
        self._ledger: dict[tuple[str, int], dict[str, Any]] = {}
        self._status: dict[str, str] = {}
        self.version = 0

    def add_release(self, schema: str, value: Mapping[str, Any], partition: int = 0, offset: int = 0) -> None:
        """Keep one decoded releases-topic record (dropping the oldest beyond ``keep``)."""
        view = release_view(schema, value)
        key = (view["time"], partition, offset)
        with self._lock:
            bisect.insort(self._releases, (key, view), key=lambda pair: pair[0])
            del self._releases[: max(0, len(self._releases) - self.keep)]
            self.version += 1

    def add_ledger_entry(self, value: Mapping[str, Any]) -> None:
        """Keep one decoded ``LedgerEntry`` record (a re-read of the same entry replaces it)."""
        view = ledger_view(value)
        with self._lock:
            self._ledger[(view["ledger_id"], view["sequence"])] = view
            self.version += 1

    def set_status(self, reader: str, status: str) -> None:
        """What reader ``reader`` is doing (shown on the page, and logged when it changes)."""
        with self._lock:
            changed = self._status.get(reader) != status
            if changed:
                self._status[reader] = status
                self.version += 1
        if changed:
            logger.info("%s: %s", reader, status)

    def snapshot(self, since: int | None = None) -> dict[str, Any]:
        """The page's JSON: ``{"version", "releases" (oldest first), "ledger" (per ledger id, by
        sequence), "status"}``; only ``{"version"}`` if nothing changed since version ``since``."""
        with self._lock:
            if since is not None and since == self.version:
                return {"version": self.version}
            ledgers: dict[str, list[dict[str, Any]]] = {}
            for (ledger_id, _), view in sorted(self._ledger.items()):
                ledgers.setdefault(ledger_id, []).append(view)
            return {
                "version": self.version,
                "releases": [view for _, view in self._releases],
                "ledger": ledgers,
                "status": dict(self._status),
            }


# --- the readers -----------------------------------------------------------------------------------


class TopicReader(threading.Thread):
    """Reads one topic from its beginning with ``read_committed`` into ``handle`` until ``stop`` is
    set; waits for a topic that does not exist yet (retrying every ``retry_s``). An undecodable
    record stops this reader, its error shown on the page (a committed reader never skips data)."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        schemas: tuple[str, ...],
        handle: Callable[[Any], None],
        state: DashboardState,
        stop: threading.Event,
        retry_s: float = 2.0,
    ) -> None:
        super().__init__(name=f"dashboard-{name}", daemon=True)
        self.reader_name, self.bootstrap, self.topic = name, bootstrap, topic
        self.schemas, self.handle, self.state, self.stop, self.retry_s = schemas, handle, state, stop, retry_s

    def run(self) -> None:
        from privstream.connectors.avro_codec import AvroDecodeError
        from privstream.connectors.clients import BrokerUnreachable
        from privstream.connectors.consume import TopicNotFound, committed_reader

        while not self.stop.is_set():
            try:
                with committed_reader(self.bootstrap, self.topic, schemas=self.schemas) as reader:
                    self.state.set_status(self.reader_name, "reading (read_committed)")
                    for record in reader.records(until=self.stop.is_set, poll_ms=300):
                        self.handle(record)
                return
            except TopicNotFound:
                self.state.set_status(self.reader_name, "waiting for the topic to exist")
            except BrokerUnreachable as exc:
                self.state.set_status(self.reader_name, f"waiting for the broker: {exc}")
            except AvroDecodeError as exc:
                self.state.set_status(self.reader_name, f"stopped: undecodable record: {exc}")
                return
            except Exception as exc:  # keep the server up; the page shows what went wrong
                logger.debug("%s: reader failed", self.topic, exc_info=True)
                self.state.set_status(self.reader_name, f"error: {type(exc).__name__}: {exc}; retrying")
            self.stop.wait(self.retry_s)


def start_readers(
    state: DashboardState, bootstrap: str, topic: str, ledger_topic: str, stop: threading.Event
) -> list[TopicReader]:
    """Start the releases and ledger readers (daemon threads) filling ``state``."""
    readers = [
        TopicReader(
            "releases",
            bootstrap,
            topic,
            RELEASE_SCHEMAS,
            lambda r: state.add_release(r.schema, r.value, r.partition, r.offset),
            state,
            stop,
        ),
        TopicReader(
            "ledger",
            bootstrap,
            ledger_topic,
            LEDGER_SCHEMAS,
            lambda r: state.add_ledger_entry(r.value),
            state,
            stop,
        ),
    ]
    for reader in readers:
        reader.start()
    return readers


# --- the web app -----------------------------------------------------------------------------------


def plotly_js_path() -> Path:
    """``plotly.min.js`` as shipped in the ``plotly`` wheel (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(MISSING_EXTRA)
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise FileNotFoundError(f"plotly.min.js not found at {path}: reinstall plotly ({MISSING_EXTRA})")
    return path


def create_app(state: DashboardState, info: Mapping[str, str]) -> Any:
    """The Starlette app: the page, its script and style, plotly.js, and ``/api/state?since=V``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    static = resources.files("privstream.connectors") / STATIC
    page = (static / "index.html").read_text(encoding="utf-8")
    script = (static / "dashboard.js").read_text(encoding="utf-8")
    style = (static / "dashboard.css").read_text(encoding="utf-8")
    plotly_js = plotly_js_path()
    no_cache = {"Cache-Control": "no-store"}

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers=no_cache)

    async def dashboard_js(request: Request) -> Response:
        return Response(script, media_type="text/javascript", headers=no_cache)

    async def dashboard_css(request: Request) -> Response:
        return Response(style, media_type="text/css", headers=no_cache)

    async def plotly(request: Request) -> Response:
        return FileResponse(plotly_js, media_type="text/javascript")

    async def api_state(request: Request) -> Response:
        since = request.query_params.get("since")
        try:
            version = None if since is None else int(since)
        except ValueError:
            return JSONResponse({"error": f"since: expected an integer, got {since!r}"}, status_code=400)
        body = state.snapshot(version)
        body["info"] = dict(info)
        return JSONResponse(body, headers=no_cache)

    return Starlette(
        routes=[
            Route("/", index),
            Route("/static/dashboard.js", dashboard_js),
            Route("/static/dashboard.css", dashboard_css),
            Route("/static/plotly.min.js", plotly),
            Route("/api/state", api_state),
        ]
    )


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), so the URL printed is live."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class _Terminated(KeyboardInterrupt):
    """SIGTERM: stop like Ctrl-C, but with exit status 0 (a service manager's normal stop)."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard until Ctrl-C (exit 130) or SIGTERM (exit 0): one line with the URL on
    start, the readers' status changes, one line on stop."""
    try:
        import uvicorn

        plotly_js_path()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        detail = str(exc) if MISSING_EXTRA in str(exc) else f"{exc} ({MISSING_EXTRA})"
        print(f"privstream dashboard: error: {detail}", file=sys.stderr)
        return 2
    from privstream.connectors.clients import parse_bootstrap

    from privstream.console import console_logging

    try:
        parse_bootstrap(args.bootstrap)
        state = DashboardState(args.keep)
        sock = _listen(args.host, args.port)
    except (ValueError, OSError, OverflowError) as exc:
        # the ValueErrors name their option (``keep: ...``, ``bootstrap: ...``)
        detail = f"--{exc}" if isinstance(exc, ValueError) else f"--host/--port: {exc}"
        print(f"privstream dashboard: error: {detail}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    info = {"bootstrap": args.bootstrap, "topic": args.topic, "ledger_topic": args.ledger_topic}
    stop = threading.Event()
    readers: list[TopicReader] = []
    started = time.monotonic()
    # uvicorn handles SIGINT/SIGTERM itself, then re-raises the signal to the handler it found:
    # SIGTERM's is made to interrupt like Ctrl-C, so both end in the one line below
    previous = signal.signal(signal.SIGTERM, _terminate)
    status = 0
    console_logging("privstream dashboard")
    try:
        readers = start_readers(state, args.bootstrap, args.topic, args.ledger_topic, stop)
        server = uvicorn.Server(
            uvicorn.Config(create_app(state, info), log_level="warning", timeout_graceful_shutdown=2)
        )
        print(
            f"privstream dashboard: {url} (releases: {args.topic}, ledger: {args.ledger_topic} on "
            f"{args.bootstrap}); Ctrl-C to stop",
            flush=True,
        )
        server.run(sockets=[sock])
    except _Terminated:
        status = 0
    except KeyboardInterrupt:
        status = 130  # Ctrl-C: the shell's 128 + SIGINT, as every command (privstream.cli)
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop.set()
        for reader in readers:
            reader.join(timeout=2)  # daemon threads: one blocked in a broker probe is left behind
        sock.close()
    print(f"privstream dashboard: stopped after {time.monotonic() - started:.0f} s", flush=True)
    return status
