"""privstream: differentially private frequency estimation and heavy hitters over streams.

The core package (this one) holds sketches, exact noise samplers, release mechanisms, privacy
accounting and local-DP randomisers. It never imports Flink or Kafka; those live in
``privstream.operators``, ``privstream.connectors`` and ``privstream.jobs``.
"""

from importlib import metadata

try:
    __version__ = metadata.version("privstream")  # one source of truth: pyproject.toml
except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout without install
    __version__ = "0+unknown"
