"""The documentation site (issue 28): it builds from ``docs/`` with ``mkdocs build --strict`` and no
warning (broken links and anchors fail: mkdocs.yml's ``validation``), its generated reference covers
every command, job and Avro schema, README stays short and links only to files that exist, and
``privstream docs`` builds it."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
pytest.importorskip("pyflink", reason="the API pages import privstream.flink (the flink extra)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once as CI and ``privstream docs --build`` build it (strict)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    return out


def _text(html_path: Path) -> str:
    return re.sub(r"<[^>]+>", "", html_path.read_text())


def test_site_builds_strict_with_every_page(site: Path) -> None:
    pages = sorted(p.relative_to(DOCS).with_suffix(".html") for p in DOCS.rglob("*.md"))
    missing = [str(p) for p in pages if not (site / p).is_file()]
    assert not missing and (site / "index.html").is_file(), missing
    assert (site / "images" / "dashboard.png").is_file()  # the output page's screenshot
    assert not (site / "hooks.html").exists() and not (site / "hooks.py").exists()


def _commands(parser: argparse.ArgumentParser, prog: str) -> list[str]:
    out = [prog]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _commands(sub, f"{prog} {name}")
    return out


def test_cli_reference_has_every_command_and_job(site: Path) -> None:
    from privstream.cli import COMMANDS, build_parser

    text = _text(site / "reference" / "cli.html")
    commands = _commands(build_parser(), "privstream")
    for name in COMMANDS:
        assert f"privstream {name}" in commands
    for job in ("heavy-hitters", "sliding-window", "continual-monitor", "ldp-heavy-hitters"):
        assert f"privstream run {job}" in commands
    html = (site / "reference" / "cli.html").read_text()
    for command in commands[1:]:
        anchor = re.sub(r"[^a-z0-9]+", "-", command)
        assert f'id="{anchor}"' in html, command
    # the options come from the parsers: a default and a help text of each kind
    assert "--stop-at-end-markers" in text and "--window-items" in text and "--punctuate-every" in text
    assert "PRIVSTREAM_BOOTSTRAP" in text and "--build DIR" in text


def test_avro_reference_has_every_current_schema(site: Path) -> None:
    html = (site / "reference" / "avro.html").read_text()
    for path in (ROOT / "connectors" / "schemas").glob("*.avsc"):
        if re.search(r"\.v\d+\.avsc$", path.name):
            assert path.name in html, path.name  # listed as an older version kept
            continue
        schema = json.loads(path.read_text())
        assert f'id="{schema["name"].lower()}"' in html, path.name
        for field in schema["fields"]:
            assert f"<code>{field['name']}</code>" in html, (path.name, field["name"])


def test_api_reference_renders_the_docstrings(site: Path) -> None:
    from privstream.flink import private_heavy_hitters

    html = (site / "reference" / "api" / "flink.html").read_text()
    for name in ("private_heavy_hitters", "private_sliding_window", "private_top_items", "KafkaLedger"):
        assert f'id="privstream.flink.{name}"' in html, name
    from privstream import flink

    for name in flink.__all__:  # the re-exports from privstream.operators too (documented from operators/)
        module = getattr(flink, name).__module__.removeprefix("privstream.")
        assert f'id="privstream.flink.{name}"' in html or f'id="{module}.{name}"' in html, name
    first = " ".join((private_heavy_hitters.__doc__ or "").replace("``", "").split()[:6])
    assert first in re.sub(r"\s+", " ", _text(site / "reference" / "api" / "flink.html"))
    expected = {
        "sketches": "MisraGries",
        "mechanisms": "release",
        "accounting": "PrivacyLedger",
        "ldp": "HgLdpServer",
        "window": "DPSWSketch",
        "noise": "discrete_gaussian",
    }
    for page, name in expected.items():
        assert name in _text(site / "reference" / "api" / f"{page}.html"), (page, name)


README_LIMIT = 8 * 1024


def test_readme_is_short_and_links_into_the_site() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_LIMIT, f"README.md is {len(readme.encode())} bytes"
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 10
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).is_file(), link
    # the two fresh-clone commands, verbatim (.ci/run runs the second)
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[jobs]' && .venv/bin/privstream setup "
        "&& .venv/bin/privstream quickstart"
    ) in readme
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in readme


def test_privstream_docs_builds_the_site(tmp_path: Path) -> None:
    """``privstream docs --build DIR`` (what README and the home page say) writes the site; without a
    configuration it says so in one line, exit 2."""
    from privstream.cli import main

    assert main(["docs", "--build", str(tmp_path / "site")]) == 0
    assert (tmp_path / "site" / "index.html").is_file()
    done = subprocess.run(
        [sys.executable, "-m", "privstream.cli", "docs", "--config", str(tmp_path / "none.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no site configuration" in done.stderr
