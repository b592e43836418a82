"""Runnable Flink jobs (``privstream.jobs``): ``python -m privstream.jobs.<name>`` or ``flink run -py``."""
