"""privstream: differentially private frequency estimation and heavy hitters over streams.

The core package (this one) holds sketches, exact noise samplers, release mechanisms, privacy
accounting and local-DP randomisers. It never imports Flink or Kafka; those live in
``privstream.operators``, ``privstream.connectors`` and ``privstream.jobs``.
"""

__version__ = "0.1.0"
