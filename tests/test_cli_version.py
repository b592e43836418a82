"""``privstream --version`` prints the installed distribution's version (pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata


def test_version_is_the_installed_distributions() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "privstream.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"privstream {metadata.version('privstream')}"
