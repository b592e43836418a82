"""TESTS ONLY: the heavy-hitters command line with seeded release noise, for ``flink run -py``.

``flink run -py tests/jobs/seeded_heavy_hitters.py SEED SKETCHES_TOPIC <heavy-hitters options...>``
runs exactly ``python -m privstream.jobs.heavy_hitters <options...>`` (the same parsing, checks and
job), with the noise seed and the topic of the (non-private) pre-noise sketches injected through the
programmatic API (:class:`privstream.jobs.config.TestHooks`): the user command line has no such options.
"""

from __future__ import annotations

import sys

from privstream.jobs.config import TestHooks
from privstream.jobs.heavy_hitters import main

if __name__ == "__main__":
    seed, sketches_topic, *options = sys.argv[1:]
    sys.exit(main(options, hooks=TestHooks(noise_seed=int(seed), expose_sketches_topic=sketches_topic)))
