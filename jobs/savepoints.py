"""Stop a running job with a savepoint (works around PyFlink 2.3's broken ``JobClient.stop_with_savepoint``).

PyFlink 2.3's wrapper calls the removed two-argument Java method; the Java ``JobClient`` needs a
``SavepointFormatType``. :func:`stop_with_savepoint` calls it through the gateway. Resume with
``--restore-from <path>`` (``execution.state-recovery.path``).
"""

from __future__ import annotations

from typing import Any


def stop_with_savepoint(
    job_client: Any, directory: str, *, timeout_s: float = 120.0, drain: bool = False
) -> str:
    """Stop the job behind a PyFlink ``JobClient``, writing a canonical savepoint under ``directory``;
    returns the savepoint path. ``drain`` emits the final watermark first (closes every epoch)."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    fmt = jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    target = directory if "://" in directory else f"file://{directory}"
    future = job_client._j_job_client.stopWithSavepoint(drain, target, fmt)
    return str(future.get(int(timeout_s * 1000), jvm.java.util.concurrent.TimeUnit.MILLISECONDS))
