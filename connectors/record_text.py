"""Every record type of the project as text a person reads (``privstream tail``) or as a JSON object.

:func:`render` gives the lines of one decoded record: a head line (where it is, its type and what
identifies it) and, for the types that carry items, an indented table. A ``Release`` shows its
epoch, window, the guarantee in one line (ε, δ, mechanism, the neighbour relation abbreviated, the
privacy unit) and its error bound, then its items with their noisy counts. Types without a renderer
of their own (a schema added later) get a generic ``field=value`` line, so nothing decodable is
ever hidden. :func:`json_value` makes a decoded value JSON-serialisable (bytes as hex strings).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

#: rows of an item table shown before "… N more" (``--json`` shows them all)
MAX_ROWS = 50
_RELATION_CUTS = (";", ":", " (", " at ", " in one ")


def utc(ms: int | None) -> str:
    """Milliseconds since the Unix epoch as ``2026-11-27 07:30:04.120 UTC`` ("—" for None)."""
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def relation_short(text: str, limit: int = 48) -> str:
    """The neighbour relation's head: its text up to the first qualification ("replace one event",
    "add/remove one event", "local DP", "event level, per node")."""
    head = text
    for cut in _RELATION_CUTS:
        at = head.find(cut)
        if at > 0:
            head = head[:at]
    head = head.strip()
    return head if len(head) <= limit else head[: limit - 1] + "…"


def _number(value: float) -> str:
    return f"{value:g}"


def _guarantee(value: Mapping[str, Any], mechanism: str | None = None) -> str:
    """``(ε=1, δ=1e-06)-DP · gshm · replace one event · unit: one event``."""
    parts = [f"(ε={_number(value['epsilon'])}, δ={_number(value.get('delta', 0.0))})-DP"]
    if value.get("rho"):
        parts[0] += f", ρ={_number(value['rho'])}-zCDP"
    if mechanism:
        parts.append(mechanism)
    parts.append(relation_short(value.get("neighbour_relation", "")))
    if value.get("privacy_unit"):
        parts.append(f"unit: {relation_short(value['privacy_unit'])}")
    return "guarantee: " + " · ".join(p for p in parts if p)


def _error_bound(bound: Mapping[str, Any] | float) -> str:
    if not isinstance(bound, Mapping):  # Release.v1: a bare max(below, above)
        return f"error bound: ±{_number(bound)}"
    sketch = "" if bound["sketch_term"] in ("", "0") else f", and up to {bound['sketch_term']} below (sketch)"
    return (
        f"error bound: -{_number(bound['below'])} / +{_number(bound['above'])} "
        f"with probability ≥ {_number(1 - bound['beta'])}{sketch}"
    )


def _table(header: tuple[str, str], rows: Sequence[tuple[Any, Any]], indent: str = "    ") -> list[str]:
    if not rows:
        return [f"{indent}(no items)"]
    width = max(len(header[0]), *(len(str(r[0])) for r in rows[:MAX_ROWS]))
    out = [f"{indent}{header[0]:>{width}}  {header[1]:>12}"]
    for item, count in rows[:MAX_ROWS]:
        shown = f"{count:,}" if isinstance(count, int) else f"{count:,.1f}"
        out.append(f"{indent}{item!s:>{width}}  {shown:>12}")
    if len(rows) > MAX_ROWS:
        out.append(f"{indent}… {len(rows) - MAX_ROWS} more (--json shows all)")
    return out


def _window(start: int | None, end: int | None) -> str:
    return "" if start is None and end is None else f"window {utc(start)} → {utc(end)}"


def _release(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    head = f"epoch {v['epoch']}" if v.get("epoch") is not None else "no epoch"
    head += f"  {_window(v.get('window_start'), v.get('window_end'))}  released {utc(v['release_time'])}"
    items = [(r["item"], r["count"]) for r in v["items"]]
    lines = [_guarantee(v, v["mechanism"]), _error_bound(v["error_bound"]), f"{len(items)} items:"]
    return head, lines + _table(("item", "noisy count"), items)


def _window_release(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    end = v.get("window_end")
    if v.get("windowing", "count") == "count":  # a count window's ends are stream positions, not times
        span = f"positions {v['window_start']}..{v['position'] if end is None else end}"
    else:
        span = _window(v["window_start"], v["position"] if end is None else end)
    head = (
        f"shard {v['shard']}/{v['shards']} substream {v['substream']} ({v['windowing']}) {span}  "
        f"ledger {v['ledger_id']} #{v['ledger_sequence']} {v['ledger_entry_hash'][:12]}"
    )
    hitters = [(r["item"], r["estimate"]) for r in v["heavy_hitters"]]
    lines = [
        _guarantee(v, "dpsw-sketch"),
        f"heavy hitters (≥ {v['heavy_threshold']:,}, γ={_number(v['gamma'])}); "
        f"{len(v['estimates'])} estimates (--json)",
    ]
    return head, lines + _table(("item", "estimate"), hitters)


def _ldp_release(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    head = (
        f"deployment {v['deployment']} {v['scheme']} epoch {v['epoch']}  {v['reports']:,} reports  "
        f"state v{v['state_version']}  released {utc(v['release_time'])}"
    )
    items = [(r["item"], r["estimate"]) for r in v["items"]]
    return head, [_guarantee(v, v["scheme"]), f"{len(items)} items:", *_table(("item", "estimate"), items)]


def _refused(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    epoch = "" if v.get("epoch") is None else f"epoch {v['epoch']} "
    return (
        f"{epoch}REFUSED: {v['reason']}  ledger {v['ledger_id'] or '—'}",
        [
            v["detail"],
            f"requested (ε={_number(v['epsilon_requested'])}, δ={_number(v['delta_requested'])}); spent "
            f"(ε={_number(v['epsilon_spent'])}, δ={_number(v['delta_spent'])}) of "
            f"(ε={_number(v['epsilon_total'])}, δ={_number(v['delta_total'])})",
        ],
    )


def _simple(fmt: str, *time_fields: str) -> Callable[[Mapping[str, Any]], tuple[str, list[str]]]:
    """A one-line renderer: ``fmt`` over the value's fields, ``time_fields`` shown as UTC times."""

    def render_value(v: Mapping[str, Any]) -> tuple[str, list[str]]:
        shown = dict(v)
        for name in time_fields:
            shown[name] = utc(v[name])
        return fmt.format(**shown), []

    return render_value


def _dead_letter(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    size = 0 if v["original_value"] is None else len(v["original_value"])
    return f"{v['topic']}[{v['partition']}]@{v['offset']} ({size} bytes) failed {utc(v['failed_time'])}", [
        v["error"]
    ]


def _event_batch(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    events = v["events"]
    if not events:
        return "0 events", []
    times = [e["event_time"] for e in events]
    first = ", ".join(str(e["item"]) for e in events[:8]) + (", …" if len(events) > 8 else "")
    return f"{len(events)} events {utc(min(times))} → {utc(max(times))}: items {first}", []


def _continual_update(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    carried = f"{len(v['updates'])} updates" if v["mode"] == "lu" else f"{len(v['tables'])} tables"
    return (
        f"node {v['node']} step {v['step']} (epoch {v['epoch']}) {v['mode']}: {carried}, {v['words']} words  "
        f"session {v.get('session') or '—'}",
        [],
    )


def _hg_state(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    return (
        f"deployment {v['deployment']} {v['scheme']} v{v['version']}: {len(v['hot_items'])} hot items  "
        f"run {v['run_id'].hex()[:16]}  published {utc(v['published_time'])}",
        [],
    )


def _generic(v: Mapping[str, Any]) -> tuple[str, list[str]]:
    return " ".join(f"{k}={_short(x)}" for k, x in v.items()), []


def _short(value: Any) -> str:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, list):
        return f"[{len(value)}]"
    text = str(value)
    return text if len(text) <= 40 else text[:39] + "…"


_RENDERERS: dict[str, Callable[[Mapping[str, Any]], tuple[str, list[str]]]] = {
    "Release": _release,
    "WindowRelease": _window_release,
    "LdpRelease": _ldp_release,
    "ReleaseRefused": _refused,
    "LedgerEntry": _simple(
        "ledger {ledger_id} #{sequence}: spent (ε={epsilon_spent:g}, δ={delta_spent:g}) of "
        "(ε={epsilon_total:g}, δ={delta_total:g}); last charge {last_charge}  at {entry_time}",
        "entry_time",
    ),
    "LedgerFence": _simple(
        "ledger {ledger_id} start-up fence {nonce:.12} by {job_name} on {host} pid {pid}  at {fence_time}",
        "fence_time",
    ),
    "DeadLetter": _dead_letter,
    "SketchSnapshot": _simple(
        "{sketch_type} ({build}) shard {shard} epoch {epoch}: n={n}  at {created_time}", "created_time"
    ),
    "EndMarker": _simple("end of producer {producer_id}: {events_sent:,} events sent"),
    "EpochWatermark": _simple("punctuation of {producer_id}: {watermark_ms}", "watermark_ms"),
    "Event": _simple("item {item} user {user_id} at {event_time}", "event_time"),
    "EventBatch": _event_batch,
    "UserSetEvent": _simple("user {user_id} items {items} at {event_time}", "event_time"),
    "LdpReport": _simple("{scheme} report against state v{state_version} at {report_time}", "report_time"),
    "HgLdpState": _hg_state,
    "ContinualUpdate": _continual_update,
}


def render(schema: str, value: Mapping[str, Any], where: str) -> list[str]:
    """The text of one decoded record: ``"<where>  <schema>  <head>"`` (ending in ``run <id>``, its
    first 12 characters, when the record names its run) and indented detail lines."""
    head, lines = _RENDERERS.get(schema, _generic)(value)
    run_id = value.get("run_id")
    if isinstance(run_id, str) and run_id:
        head += f"  run {run_id[:12]}"
    return [f"{where}  {schema}  {head}", *(f"  {line}" for line in lines)]


def json_value(value: Any) -> Any:
    """``value`` with bytes as hex strings, recursively (the rest of a decoded record is JSON already)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, Mapping):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value
