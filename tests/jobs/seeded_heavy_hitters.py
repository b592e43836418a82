"""TESTS ONLY: the heavy-hitters command line with seeded release noise, for ``flink run -py``.

``flink run -py tests/jobs/seeded_heavy_hitters.py SEED <heavy-hitters options...>`` runs exactly
``python -m privstream.jobs.heavy_hitters <options...>`` (the same parsing, checks and job), with the
noise seed injected through the programmatic API (:class:`privstream.jobs.config.TestHooks`): the user
command line has no such option.
"""

from __future__ import annotations

import sys

from privstream.jobs.config import TestHooks
from privstream.jobs.heavy_hitters import main

if __name__ == "__main__":
    seed, *options = sys.argv[1:]
    sys.exit(main(options, hooks=TestHooks(noise_seed=int(seed))))
