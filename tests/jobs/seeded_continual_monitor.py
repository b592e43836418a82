"""TESTS ONLY: tests/test_flink_continual_monitor.py's PDCH-LU job (its seeded node noise keys) at a
given parallelism, for ``flink run -py`` on a standalone cluster.

``flink run -d -py tests/jobs/seeded_continual_monitor.py BOOTSTRAP TOPIC PREFIX PARALLELISM CHECKPOINT_DIR``
builds exactly the graph of that file's ``job(BOOTSTRAP, TOPIC, PREFIX)`` (through
:func:`privstream.jobs.continual_monitor.build`) at ``--parallelism PARALLELISM`` and runs it; the
noise seed reaches the job only through the programmatic ``TestHooks`` (no command-line option).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests package

from privstream.jobs.continual_monitor import build, environment, with_secrets  # noqa: E402

from tests.test_flink_continual_monitor import job  # noqa: E402

if __name__ == "__main__":
    bootstrap, topic, prefix, parallelism, checkpoints = sys.argv[1:]
    config = replace(job(bootstrap, topic, prefix), parallelism=int(parallelism), checkpoint_dir=checkpoints)
    config = with_secrets(config)
    env = environment(config)
    build(env, config)
    env.execute(config.job_name)
