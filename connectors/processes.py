"""Child processes the connectors launch (tansu, s3rver): start, log to a file, stop cleanly.

Stopping sends SIGTERM, waits, then SIGKILL. On Linux the child also gets SIGTERM if this Python
process dies (``PR_SET_PDEATHSIG``), so a crashed test run does not leave brokers behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def wait_for_port(
    host: str,
    port: int,
    timeout: float,
    *,
    alive: Callable[[], bool],
    what: str,
    log: Callable[[], str],
    ready: Callable[[], bool] | None = None,
) -> None:
    """Wait until ``host:port`` accepts TCP connections (and ``ready()`` holds), or fail with the log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"{what} exited during start-up; log:\n{log()}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                pass
            if ready is None or ready():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not become ready within {timeout:g} s; log:\n{log()}")


class ManagedProcess:
    """One child process with its output in ``log_path``."""

    def __init__(self, *, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def _launch(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        if self._process is not None:
            raise RuntimeError(f"{self.name} is already running (pid {self._process.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,  # Ctrl-C reaches us, and we stop the child in order
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, n_bytes: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "(no log)"
        return data[-n_bytes:].decode("utf-8", errors="replace")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL. Returns the exit code (None if never started)."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout)
        return process.returncode

    def __del__(self) -> None:  # last resort: never leak a child
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except OSError:
                pass
