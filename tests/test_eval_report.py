"""``privstream eval <study> --report PAGE`` (issue 28): the run as a site page — its command, claims,
plots and summary — that the documentation site builds strictly, so an evaluation page regenerates
from the run instead of being pasted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from privstream.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_report_is_a_site_page_with_the_runs_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the eval extra draws the plots")
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "eval" / "lebeda-tetek.md"
    argv = ["eval", "lebeda-tetek", "--tiny", "--no-progress", "--out", str(tmp_path / "run")]
    assert main([*argv, "--report", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Results: `lebeda-tetek`")
    assert f"`privstream eval lebeda-tetek --tiny --report {page}`" in text  # the command that made it
    assert "## Claims" in text and "**PASS**" in text and "## Summary" in text
    plots = sorted((docs / "eval" / "lebeda-tetek").glob("*.png"))
    assert plots and all(f"](lebeda-tetek/{p.name})" in text for p in plots)
    assert "```" not in text  # nothing for tests/test_docs_snippets.py to run

    pytest.importorskip("mkdocs", reason="the docs extra")
    pytest.importorskip("pyflink", reason="the site's API pages import privstream.flink")
    from mkdocs.commands import build
    from mkdocs.config import load_config

    site = tmp_path / "site"
    config = load_config(str(ROOT / "mkdocs.yml"), docs_dir=str(docs), site_dir=str(site), strict=True)
    build.build(config)  # strict: a broken image link would abort the build
    html = (site / "eval" / "lebeda-tetek.html").read_text()
    assert all(f'src="lebeda-tetek/{p.name}"' in html for p in plots)
    assert all((site / "eval" / "lebeda-tetek" / p.name).is_file() for p in plots)
