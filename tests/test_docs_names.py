"""The docs name only what exists (issue 28): the code blocks are run or parsed
(tests/test_docs_snippets.py), and this test checks the rest of the text — prose, diagrams and
``text`` blocks — for two kinds of drift:

* a CamelCase name (a class, an Avro record) that no Python file of the project defines and that is
  not one of the outside names below (Flink's, Kafka's, Python's, the papers' code's);
* a repository path (``operators/…``, ``tests/…``, …) that does not exist, other than the examples
  a guide asks the reader to create.

Both fail with the page and the name, so a renamed class or a moved file shows up here.
"""

from __future__ import annotations

import re
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

#: CamelCase: ``ReleaseFunction``; or led by an acronym: ``DPSWParams``, ``GSHMParameters`` (not a
#: plural acronym such as ``PCMSs``)
CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[A-Z]{2,}[a-z]{2,}[A-Za-z0-9]*\b")
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


def test_every_camel_case_name_in_the_docs_exists() -> None:
    defined = _defined()
    drift = sorted(
        f"{page.relative_to(ROOT)}: {name}"
        for page in _pages()
        for name in set(CAMEL.findall(page.read_text(encoding="utf-8")))
        if name not in defined and name not in OUTSIDE
    )
    assert not drift, f"names the project does not define (renamed? add outside names to OUTSIDE): {drift}"


def test_every_repository_path_in_the_docs_exists() -> None:
    missing = sorted(
        f"{page.relative_to(ROOT)}: {path}"
        for page in _pages()
        for path in set(PATH.findall(page.read_text(encoding="utf-8")))
        if not (ROOT / path).exists() and path not in EXAMPLE_PATHS and not path.endswith("_")
    )
    assert not missing, f"paths that do not exist: {missing}"


def test_the_checks_catch_a_renamed_class_and_a_moved_file() -> None:
    """The two patterns find what the issue found (``EpochReleaseFunction``, a wrong path)."""
    text = "EpochReleaseFunction, one key   privstream/operators/shard_keys.py"
    assert "EpochReleaseFunction" in CAMEL.findall(text) and "EpochReleaseFunction" not in _defined()
    assert CAMEL.findall("DPSWParams, PCMSs, NDCG") == ["DPSWParams"]
    assert PATH.findall(text) == ["privstream/operators/shard_keys.py"]
    assert not (ROOT / "privstream/operators/shard_keys.py").exists()


def test_the_formats_page_names_every_current_schema() -> None:
    """docs/reference/formats.md's list of message schemas is hand-written: it must name each one."""
    page = (ROOT / "docs/reference/formats.md").read_text(encoding="utf-8")
    current = sorted(p.stem for p in (ROOT / "connectors/schemas").glob("*.avsc") if "." not in p.stem)
    assert len(current) >= 15
    assert not [name for name in current if f"`{name}`" not in page]
