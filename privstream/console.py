"""The command line's console: ``privstream`` loggers' INFO records on stderr, one prefix per line.

Modules below the CLI log with :mod:`logging`; a command that wants its progress seen calls
:func:`console_logging` once (the jobs, ``privstream dashboard``). Other libraries' loggers are left
alone.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


class _Console(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is at the time (never a stale stream)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def console_logging(prefix: str = "privstream") -> None:
    """Show the ``privstream`` loggers' INFO records on stderr as ``<prefix>: <message>``, once per
    process (a second call keeps the first handler)."""
    root = logging.getLogger("privstream")
    if any(isinstance(h, _Console) for h in root.handlers):
        return
    handler = _Console()
    handler.setFormatter(logging.Formatter(f"{prefix}: %(message)s"))
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)
