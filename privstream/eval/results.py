"""Result tables (CSV and JSON), their summary over repetitions, and PNG plots.

A *table* is a list of flat rows (``dict`` of str -> number, str, bool or None). :func:`write_table`
writes ``NAME.csv`` and ``NAME.json`` (NaN becomes an empty CSV cell and JSON ``null``).
:func:`summarize` groups rows by columns and averages every numeric column (NaN-aware), adding
``runs`` and, for the columns asked for, ``_std``. :class:`PlotSpec` describes a line or bar plot
of a table, one panel per facet value, and :func:`render_plot` draws it with matplotlib's Agg
backend (imported only there: the core needs no matplotlib).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

Row = dict[str, Any]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _json_value(value.item())
    return value


def columns_of(rows: Sequence[Row]) -> list[str]:
    """Every column of ``rows``, in order of first appearance."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def write_table(out_dir: Path, name: str, rows: Sequence[Row]) -> list[Path]:
    """Write ``rows`` as ``NAME.csv`` and ``NAME.json`` in ``out_dir``; returns the two paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cols = columns_of(rows)
    csv_path, json_path = out_dir / f"{name}.csv", out_dir / f"{name}.json"
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=cols)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: ("" if (v := _json_value(row.get(c))) is None else v) for c in cols})
    with json_path.open("w", encoding="utf-8") as handle:
        json.dump([{k: _json_value(v) for k, v in row.items()} for row in rows], handle, indent=1)
        handle.write("\n")
    return [csv_path, json_path]


def read_table(path: Path) -> list[Row]:
    """Rows of a table written by :func:`write_table`, from its JSON file."""
    with path.open(encoding="utf-8") as handle:
        rows = json.load(handle)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: not a table")
    return rows


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return float("nan")
    if min(finite) == max(finite):
        return finite[0]  # exact for constant columns (no rounding of the sum)
    return math.fsum(finite) / len(finite)


def _std(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    if len(finite) < 2:
        return float("nan")
    mean = sum(finite) / len(finite)
    return math.sqrt(sum((v - mean) ** 2 for v in finite) / (len(finite) - 1))


def summarize(
    rows: Sequence[Row], by: Sequence[str], *, spread: Iterable[str] = (), skip: Iterable[str] = ()
) -> list[Row]:
    """One row per distinct value of the ``by`` columns (in order of first appearance): the ``by``
    values, ``runs`` (rows in the group), the NaN-aware mean of every other numeric column except
    ``skip``, and ``COLUMN_std`` for each column in ``spread``. Non-numeric columns outside ``by``
    are kept if constant within the group."""
    by = list(by)
    skipped = set(skip) | set(by)
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(c) for c in by), []).append(row)
    spread = list(spread)
    out = []
    for key, members in groups.items():
        summary: Row = dict(zip(by, key, strict=True))
        summary["runs"] = len(members)
        for col in columns_of(members):
            if col in skipped:
                continue
            values = [m.get(col) for m in members]
            if all(v is None or _is_number(v) for v in values):
                numbers = [float("nan") if v is None else float(v) for v in values]
                summary[col] = _mean(numbers)
                if col in spread:
                    summary[f"{col}_std"] = _std(numbers)
            elif len({str(v) for v in values}) == 1:
                summary[col] = values[0]
        out.append(summary)
    return out


def select(rows: Sequence[Row], where: Mapping[str, Any]) -> list[Row]:
    """The rows whose column values match ``where`` (a value, or a tuple/list/set of allowed values)."""

    def ok(row: Row) -> bool:
        for col, want in where.items():
            value = row.get(col)
            if isinstance(want, tuple | list | set | frozenset):
                if value not in want:
                    return False
            elif value != want:
                return False
        return True

    return [row for row in rows if ok(row)]


@dataclass(frozen=True)
class PlotSpec:
    """A plot of a table: ``y`` against ``x``, one line (or bar group) per ``series`` value, one
    panel per distinct value of the ``facet`` columns; ``where`` filters rows first (see
    :func:`select`). ``hline``: a horizontal reference line (e.g. 1 − β for coverage)."""

    name: str  #: file name without .png
    x: str
    y: str
    series: str
    title: str
    table: str = "summary"
    facet: tuple[str, ...] = ()
    where: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "line"  #: "line" or "bar"
    logx: bool = False
    logy: bool = False
    xlabel: str = ""
    ylabel: str = ""
    hline: float | None = None  #: a reference value of ``y`` (a vertical line on bar plots)
    hline_label: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("line", "bar"):
            raise ValueError(f"kind: must be 'line' or 'bar', got {self.kind!r}")
        if not self.name or "/" in self.name:
            raise ValueError(f"name: a plot name is a file name without directories, got {self.name!r}")


def _sort_key(value: Any) -> tuple[int, Any]:
    return (0, value) if _is_number(value) else (1, str(value))


def _panel_rows(rows: Sequence[Row], spec: PlotSpec) -> dict[str, list[Row]]:
    panels: dict[str, list[Row]] = {}
    for row in select(rows, spec.where):
        label = ", ".join(f"{c}={row.get(c)}" for c in spec.facet) or spec.title
        panels.setdefault(label, []).append(row)
    return panels


def render_plot(rows: Sequence[Row], spec: PlotSpec, out_dir: Path) -> Path | None:
    """Draw ``spec`` from ``rows`` into ``out_dir/NAME.png`` (Agg backend); None (and a log line)
    if no row matches, or no value of ``y`` is finite. Bar plots are horizontal (one bar per
    ``x`` category and ``series`` value); the legend sits to the right of the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {
        label: members
        for label, members in _panel_rows(rows, spec).items()
        if any(_finite(r.get(spec.y)) for r in members)
    }
    if not panels:
        logger.info("plot %s: no data, skipped", spec.name)
        return None
    count = len(panels)
    cols = min(count, 3)
    nrows = math.ceil(count / cols)
    if spec.kind == "bar":
        categories = len({r.get(spec.x) for members in panels.values() for r in members})
        size = (
            6.0 * cols,
            (0.9 + 0.28 * categories * max(1, len({r.get(spec.series) for r in rows}))) * nrows,
        )
    else:
        size = (4.6 * cols, 3.5 * nrows)
    fig, axes = plt.subplots(nrows, cols, figsize=size, squeeze=False)
    names = list(dict.fromkeys(str(r.get(spec.series)) for members in panels.values() for r in members))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = {
        name: (colours[i % len(colours)], ("-", "--", ":", "-.")[(i // len(colours)) % 4])
        for i, name in enumerate(names)
    }  # one colour/line style per series in every panel
    for ax, (label, members) in zip(axes.flat, panels.items(), strict=False):
        _draw_panel(ax, members, spec, styles)
        if spec.facet:
            ax.set_title(label, fontsize=9)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    handles: list[Any] = []
    labels: list[str] = []
    for ax in list(axes.flat)[:count]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.suptitle(spec.title, fontsize=11)
    fig.tight_layout()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec.name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _draw_panel(ax: Any, rows: Sequence[Row], spec: PlotSpec, styles: Mapping[str, tuple[str, str]]) -> None:
    series: dict[str, list[Row]] = {}
    for row in rows:
        series.setdefault(str(row.get(spec.series)), []).append(row)
    if spec.kind == "line":
        for name, members in series.items():
            points = sorted(
                ((r[spec.x], r[spec.y]) for r in members if _finite(r.get(spec.y))),
                key=lambda p: _sort_key(p[0]),
            )
            if points:
                xs, ys = zip(*points, strict=True)
                colour, style = styles[name]
                ax.plot(xs, ys, marker="o", markersize=3, color=colour, linestyle=style, label=name)
        if spec.hline is not None:
            ax.axhline(
                spec.hline, color="black", linestyle="--", linewidth=0.8, label=spec.hline_label or None
            )
        if spec.logx:
            ax.set_xscale("log", base=2)
        if spec.logy:
            ax.set_yscale("log")
        ax.set_xlabel(spec.xlabel or spec.x, fontsize=8)
        ax.set_ylabel(spec.ylabel or spec.y, fontsize=8)
    else:
        categories = sorted({r.get(spec.x) for r in rows}, key=_sort_key)
        height = 0.8 / max(1, len(series))
        for i, (name, members) in enumerate(series.items()):
            values = {r.get(spec.x): r.get(spec.y) for r in members}
            widths = [values.get(c) if _finite(values.get(c)) else 0.0 for c in categories]
            ax.barh(
                [j + i * height for j in range(len(categories))],
                widths,
                height=height,
                color=styles[name][0],
                label=name,
            )
        ax.set_yticks(
            [j + 0.4 - height / 2 for j in range(len(categories))], [str(c) for c in categories], fontsize=7
        )
        ax.invert_yaxis()
        if spec.hline is not None:
            ax.axvline(
                spec.hline, color="black", linestyle="--", linewidth=0.8, label=spec.hline_label or None
            )
        if spec.logy:
            ax.set_xscale("log")
        ax.set_xlabel(spec.ylabel or spec.y, fontsize=8)
    ax.tick_params(which="both", labelsize=7)
    ax.grid(True, linewidth=0.3, alpha=0.6)
