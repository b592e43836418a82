"""The docs name only what exists (issue 28): the code blocks are run or parsed
(tests/test_docs_snippets.py), and this test checks the rest of the text — prose, diagrams and
``text`` blocks — for two kinds of drift:

* a CamelCase name (a class, an Avro record) that no Python file of the project defines and that is
  not one of the outside names below (Flink's, Kafka's, Python's, the papers' code's);
* a repository path (``operators/…``, ``tests/…``, …) that does not exist, other than the examples
  a guide asks the reader to create.

* a bare file name (``sketch_operator.py`` in a diagram, ``summary.csv``) that no file of the
  repository has and that the code does not write;
* a snake_case name in backticks (a function, a field, an option: ``release_disjoint``,
  ``read_committed``) that occurs nowhere in the project's code.

Each fails with the page and the name, so a renamed class, function or field, or a moved file, shows
up here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("privstream", "operators", "connectors", "jobs", "tests", "benchmarks", "docker", "docs")

#: CamelCase names from outside the project that the docs may use.
OUTSIDE = {
    # Flink and PyFlink
    "DataStream", "DeliveryGuarantee", "JobClient", "JobManager", "KafkaOffsetsInitializer",
    "KafkaSink", "KafkaSinks", "KafkaSource", "KeyGroupRangeAssignment", "KeyedProcessFunction",
    "ListState", "MapState", "MiniCluster", "PrometheusReporterFactory", "PyFlink",
    "SavepointFormatType", "SimpleStringSchema", "StreamExecutionEnvironment",
    "StreamTableEnvironment", "TaskManager", "TaskManagers", "ValueState", "WatermarkStrategy",
    # Kafka, Python, Rust crates
    "ListOffsets", "AttributeError", "ValueError", "SerdeJson", "PyPI",
    # other projects, datasets, people, units
    "DataSketches", "DsrHgHhLdpServer", "SpaceSaving", "MovieLens", "WorldCup", "McSherry",
    "KiB", "MiB", "NaN",
}  # fmt: skip

#: Paths a guide asks the reader to create, and Kafka/ledger names that look like paths.
EXAMPLE_PATHS = {
    "privstream/eval/studies/my_paper.py",
    "privstream/mechanisms/my_mech.py",
    "privstream/sketches/space_saving.py",
    "tests/test_sketch_space_saving.py",
    "privstream/checkpoints",
    "privstream/pdch-bf/v1",
}

#: snake_case names from outside the project (PyFlink's internals, Python's data model)
OUTSIDE_SNAKE = {"_stream_key_by_map_operator", "add_jars", "beam_sdk_worker_main", "__lt__"}

#: File names from outside the project: PyFlink's ``bin/`` scripts, a reader's own CSV
OUTSIDE_FILES = {"jobmanager.sh", "taskmanager.sh", "start-cluster.sh", "ratings.csv"}

#: CamelCase: ``ReleaseFunction``; or led by an acronym: ``DPSWParams``, ``GSHMParameters`` (not a
#: plural acronym such as ``PCMSs``)
CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[A-Z]{2,}[a-z]{2,}[A-Za-z0-9]*\b")
#: a file name not inside a path: ``sketch_operator.py``, ``summary.csv``
FILE = re.compile(r"(?<![\w/.-])([\w-]+\.(?:py|avsc|md|toml|sh|ya?ml|json|csv|png))\b")
#: a snake_case name in backticks, maybe dotted or called: ``release_disjoint``, ``x.to_bytes()``
SNAKE = re.compile(r"`(?:[\w.]+\.)?([a-z_][a-z0-9_]*_[a-z0-9_]*)(?:\([^`]*\))?`")
PATH = re.compile(r"\b((?:" + "|".join(PACKAGES) + r")/[\w./-]*\w)")


def _pages() -> list[Path]:
    """README and the hand-written pages (the generated evaluation pages are the runs' own words)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if "eval" not in p.relative_to(ROOT).parts[1:-1]]


def _defined() -> set[str]:
    """Every class, function and module-level name of the project's Python, and every Avro name."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            names |= set(re.findall(r"^\s*(?:class|def)\s+(\w+)", text, re.M))
            names |= set(re.findall(r"^(\w+)\s*[:=]", text, re.M))
    for path in (ROOT / "connectors").rglob("*.avsc"):
        names |= set(re.findall(r'"name":\s*"(\w+)"', path.read_text(encoding="utf-8")))
    return names


def _code_files() -> list[Path]:
    """The project's code and configuration (not its docs)."""
    suffixes = {".py", ".avsc", ".toml", ".sh", ".yaml", ".yml", ".json", ".cfg"}
    files = [p for p in ROOT.iterdir() if p.is_file() and p.suffix in suffixes]
    for package in PACKAGES[:-1]:
        files += [p for p in (ROOT / package).rglob("*") if p.is_file() and p.suffix in suffixes]
    return files + [p for p in (ROOT / ".ci").rglob("*") if p.is_file()]


def _file_names() -> set[str]:
    """The name of every file of the repository (outside virtualenvs, caches and the built site)."""
    skip = {".git", ".venv", "node_modules", "site", "__pycache__", ".mutmut-cache", "mutants"}
    return {
        p.name for p in ROOT.rglob("*") if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)
    }


def _unknown(pattern: re.Pattern[str], known: Callable[[str], bool]) -> list[str]:
    """``page: name`` for every match of ``pattern`` in the pages that ``known`` does not accept."""
    return sorted(
        f"{page.relative_to(ROOT)}: {name}"
        for page in _pages()
        for name in set(pattern.findall(page.read_text(encoding="utf-8")))
        if not known(name)
    )


def test_every_camel_case_name_in_the_docs_exists() -> None:
    defined = _defined()
    drift = _unknown(CAMEL, lambda name: name in defined or name in OUTSIDE)
    assert not drift, f"names the project does not define (renamed? add outside names to OUTSIDE): {drift}"


def test_every_repository_path_in_the_docs_exists() -> None:
    missing = _unknown(
        PATH, lambda path: (ROOT / path).exists() or path in EXAMPLE_PATHS or path.endswith("_")
    )
    assert not missing, f"paths that do not exist: {missing}"


def test_every_bare_file_name_in_the_docs_exists_or_is_written_by_the_code() -> None:
    names = _file_names()
    code = "\n".join(p.read_text(encoding="utf-8", errors="ignore") for p in _code_files())
    missing = _unknown(
        FILE,
        lambda name: (
            name in names or name in OUTSIDE_FILES or name in code or f'"{Path(name).stem}"' in code
        ),  # a study's table NAME, written as NAME.csv
    )
    assert not missing, f"file names that no file has and no code writes: {missing}"


def test_every_snake_case_name_in_the_docs_occurs_in_the_code() -> None:
    words = {
        w for p in _code_files() for w in re.findall(r"\w+", p.read_text(encoding="utf-8", errors="ignore"))
    }
    drift = _unknown(SNAKE, lambda name: name in words or name in OUTSIDE_SNAKE)
    assert not drift, f"names that occur nowhere in the code (renamed?): {drift}"


def test_the_checks_catch_a_renamed_class_and_a_moved_file() -> None:
    """The two patterns find what the issue found (``EpochReleaseFunction``, a wrong path)."""
    text = "EpochReleaseFunction, one key   privstream/operators/shard_keys.py"
    assert "EpochReleaseFunction" in CAMEL.findall(text) and "EpochReleaseFunction" not in _defined()
    assert CAMEL.findall("DPSWParams, PCMSs, NDCG") == ["DPSWParams"]
    assert PATH.findall(text) == ["privstream/operators/shard_keys.py"]
    assert not (ROOT / "privstream/operators/shard_keys.py").exists()
    diagram = "sketch_operator.py ─▶ epoch_releaser.py; `ReleaseFunction.emit_release(r)`, summary.csv"
    assert FILE.findall(diagram) == ["sketch_operator.py", "epoch_releaser.py", "summary.csv"]
    assert "epoch_releaser.py" not in _file_names() and "sketch_operator.py" in _file_names()
    assert SNAKE.findall(diagram) == ["emit_release"]


def test_the_formats_page_names_every_current_schema() -> None:
    """docs/reference/formats.md's list of message schemas is hand-written: it must name each one."""
    page = (ROOT / "docs/reference/formats.md").read_text(encoding="utf-8")
    current = sorted(p.stem for p in (ROOT / "connectors/schemas").glob("*.avsc") if "." not in p.stem)
    assert len(current) >= 15
    assert not [name for name in current if f"`{name}`" not in page]
