"""A local, file-backed S3 (the npm package ``s3rver``) for the durable embedded broker.

tansu's only persistent storage engine in this build is ``s3://``. :func:`ensure_s3rver` installs
``s3rver`` once into a cache directory (``$PRIVSTREAM_CACHE`` or ``~/.cache/privstream``) with
``npm install --prefix``; ``privstream setup`` calls it. :class:`LocalS3` runs it on a free loopback
port, storing objects under a data directory, with one bucket configured at start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from privstream.connectors.processes import ManagedProcess, wait_for_port

S3RVER_VERSION = "3.7.1"
#: s3rver's fixed development credentials
ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"


class S3rverMissing(RuntimeError):
    """s3rver is not installed (or npm is missing to install it)."""


def cache_dir() -> Path:
    """``$PRIVSTREAM_CACHE`` or ``~/.cache/privstream``."""
    root = os.environ.get("PRIVSTREAM_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "privstream"


def _install_prefix() -> Path:
    return cache_dir() / "s3rver"


def find_s3rver() -> Path:
    """Path of the installed ``s3rver`` executable; :class:`S3rverMissing` if absent."""
    path = _install_prefix() / "node_modules" / ".bin" / "s3rver"
    if not path.exists():
        raise S3rverMissing(
            f"s3rver is not installed at {path}: run `privstream setup` (needs npm) to install it; "
            "the durable broker (--data) stores its log in s3rver"
        )
    if shutil.which("node") is None:
        raise S3rverMissing("node is not on PATH: s3rver (the durable broker's local S3) needs Node.js")
    return path


def ensure_s3rver() -> Path:
    """Install s3rver into the cache if needed (idempotent) and return the executable's path."""
    try:
        return find_s3rver()
    except S3rverMissing:
        pass
    npm = shutil.which("npm")
    if npm is None:
        raise S3rverMissing(
            "npm is not on PATH: install Node.js/npm, then run `privstream setup` to get s3rver"
        )
    prefix = _install_prefix()
    prefix.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", f"s3rver@{S3RVER_VERSION}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise S3rverMissing(f"`npm install s3rver@{S3RVER_VERSION}` failed:\n{result.stderr[-2000:]}")
    return find_s3rver()


class LocalS3(ManagedProcess):
    """``s3rver`` on ``127.0.0.1:port`` storing under ``data_dir``, with ``bucket`` configured."""

    def __init__(
        self, data_dir: str | os.PathLike[str], *, bucket: str = "tansu", port: int | None = None
    ) -> None:
        from privstream.connectors.clients import free_port

        self.data_dir = Path(data_dir)
        self.bucket = bucket
        self.port = port if port is not None else free_port()
        super().__init__(name="s3rver", log_path=self.data_dir.parent / f"{self.data_dir.name}-s3rver.log")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tansu_env(self) -> dict[str, str]:
        """Environment for tansu's ``s3://`` engine (object_store's ``AWS_*`` variables)."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self, timeout: float = 30.0) -> LocalS3:
        executable = find_s3rver()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(executable), "-d", str(self.data_dir), "-a", "127.0.0.1", "-p", str(self.port)]
        self._launch(argv + ["--configure-bucket", self.bucket])
        wait_for_port(
            "127.0.0.1",
            self.port,
            timeout,
            alive=self.alive,
            what=f"s3rver on {self.endpoint}",
            log=self.log_tail,
        )
        return self
