"""TESTS ONLY: tests/test_flink_sliding_window.py's count-window job (its injected submission key)
at a given parallelism, for ``flink run -py`` on a standalone cluster.

``flink run -d -py tests/jobs/seeded_sliding_window.py BOOTSTRAP TOPIC PREFIX PARALLELISM CHECKPOINT_DIR``
charges the ledger and builds exactly the graph of that file's ``cluster_config(...)`` (through
:func:`privstream.jobs.sliding_window.prepare` and ``build``), then runs it; the submission key reaches
the job only through the programmatic settings (no command-line option).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests package

from privstream.jobs.sliding_window import build, environment, prepare  # noqa: E402

from tests.test_flink_sliding_window import cluster_config  # noqa: E402

if __name__ == "__main__":
    bootstrap, topic, prefix, parallelism, checkpoints = sys.argv[1:]
    config = prepare(cluster_config(bootstrap, topic, prefix, int(parallelism), checkpoints))
    env = environment(config)
    build(env, config)
    env.execute(config.job_name)
