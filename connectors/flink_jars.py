"""Flink's Kafka connector jars for the PyFlink jobs: fetched once, sha256-verified, cached.

PyFlink 2.3.0 ships no Kafka connector. Maven Central is not reachable from every build machine,
so ``privstream setup`` takes the official Apache jars from the PyPI redistribution
``shigawire-apache-flink-libraries==2.0.0.post1`` (Apache-2.0), which carries
``flink-connector-kafka`` 4.0.1-2.0 and ``kafka-clients`` 3.9.1 under ``pyflink/lib/``.

The wheel is only *downloaded* (``pip download --no-deps``) and opened as a zip: it is never
installed, because it also carries Flink 2.0 core jars that would clash with Flink 2.3's
``flink-dist``. Exactly two jars are extracted into the cache directory
(``$PRIVSTREAM_CACHE`` or ``~/.cache/privstream``, subdirectory ``jars/``) and each is checked
against a pinned sha256 before use; a mismatch is an error, never a warning. The docker image
(``docker/Dockerfile``) takes the same versions from Maven Central.

Jobs call :func:`connector_jar_urls` (``file://`` URLs for ``pipeline.jars``); it raises
:class:`ConnectorJarsError` with the fix (``privstream setup``) when the jars are absent.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

WHEEL_REQUIREMENT = "shigawire-apache-flink-libraries==2.0.0.post1"
WHEEL_SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"


@dataclass(frozen=True)
class ConnectorJar:
    """One pinned jar: where it sits in the wheel, the cache file name, and its sha256."""

    member: str
    filename: str
    sha256: str


#: The only two jars taken from the wheel (versions read from their manifests when pinned).
CONNECTOR_JARS: tuple[ConnectorJar, ...] = (
    ConnectorJar(
        member="pyflink/lib/flink-connector-kafka.jar",
        filename="flink-connector-kafka-4.0.1-2.0.jar",
        sha256="842885a51c768b2f31c946a2071656c166ee8cc6d3c02fe6c557e134e03bf228",
    ),
    ConnectorJar(
        member="pyflink/lib/kafka-clients.jar",
        filename="kafka-clients-3.9.1.jar",
        sha256="7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9",
    ),
)


class ConnectorJarsError(RuntimeError):
    """The connector jars are missing, cannot be fetched, or do not match their pinned sha256."""


def cache_dir() -> Path:
    """``$PRIVSTREAM_CACHE`` if set, else ``~/.cache/privstream``."""
    env = os.environ.get("PRIVSTREAM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "privstream"


def jar_dir() -> Path:
    return cache_dir() / "jars"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(jar: ConnectorJar, directory: Path) -> Path | None:
    """The cached jar if present and matching; raises on a present-but-wrong file."""
    path = directory / jar.filename
    if not path.exists():
        return None
    actual = _sha256(path)
    if actual != jar.sha256:
        raise ConnectorJarsError(
            f"{path} has sha256 {actual}, expected {jar.sha256}: delete it and run `privstream setup`"
        )
    return path


def find_connector_jars() -> list[Path] | None:
    """The verified cached jars, or None if any is absent (never downloads)."""
    paths = [_verified(jar, jar_dir()) for jar in CONNECTOR_JARS]
    return None if any(p is None for p in paths) else [p for p in paths if p is not None]


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest)]
    proc = subprocess.run([*cmd, WHEEL_REQUIREMENT], capture_output=True, text=True)
    wheels = sorted(dest.glob("shigawire_apache_flink_libraries-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ConnectorJarsError(
            f"could not download {WHEEL_REQUIREMENT} (needed for the Kafka connector jars): "
            f"{proc.stderr.strip()[-800:]}"
        )
    wheel = wheels[0]
    actual = _sha256(wheel)
    if actual != WHEEL_SHA256:
        raise ConnectorJarsError(f"{wheel.name} has sha256 {actual}, expected {WHEEL_SHA256}")
    return wheel


def _extract(wheel: Path, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        for jar in CONNECTOR_JARS:
            try:
                data = zf.read(jar.member)
            except KeyError as exc:
                raise ConnectorJarsError(f"{wheel.name} does not contain {jar.member}") from exc
            actual = hashlib.sha256(data).hexdigest()
            if actual != jar.sha256:
                raise ConnectorJarsError(
                    f"{jar.member} in {wheel.name} has sha256 {actual}, expected {jar.sha256}"
                )
            tmp = directory / (jar.filename + ".part")
            tmp.write_bytes(data)
            tmp.replace(directory / jar.filename)


def ensure_connector_jars() -> list[Path]:
    """Return the two verified jars, downloading and extracting them into the cache if needed.

    Raises :class:`ConnectorJarsError` if the download fails or any hash does not match.
    """
    found = find_connector_jars()
    if found is not None:
        return found
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="wheel-") as tmp:
        _extract(_download_wheel(Path(tmp)), jar_dir())
    found = find_connector_jars()
    if found is None:  # pragma: no cover - _extract wrote every jar or raised
        raise ConnectorJarsError(f"connector jars missing from {jar_dir()} after extraction")
    return found


def connector_jar_urls() -> list[str]:
    """``file://`` URLs of the verified jars for ``pipeline.jars``; raises if setup was not run."""
    found = find_connector_jars()
    if found is None:
        raise ConnectorJarsError(
            f"Flink Kafka connector jars not found in {jar_dir()}: run `privstream setup` first"
        )
    return [p.resolve().as_uri() for p in found]
