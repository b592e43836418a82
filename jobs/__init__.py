"""Runnable Flink jobs (``privstream.jobs``): ``python -m privstream.jobs.<name>`` or ``flink run -py``;
in code, :class:`privstream.jobs.job.HeavyHittersJob` with a :class:`privstream.jobs.config.HeavyHittersConfig`."""
