"""The core (``privstream/``, without the Flink/Kafka layers) type-checks cleanly under mypy.

The mypy configuration is ``[tool.mypy]`` in ``pyproject.toml``; the operators, connectors and jobs
are separate top-level directories and are not checked here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_core_type_checks_with_mypy() -> None:
    """Fails (rather than skips) if mypy is missing: the check is part of CI."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "privstream"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"mypy privstream failed:\n{result.stdout}{result.stderr}"
