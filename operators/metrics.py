"""Flink metrics of the jobs' keyed operators, in the metric group ``privstream``.

Each operator registers its metrics in ``open()`` (:meth:`OperatorMetrics.register`) in PyFlink's
metric group (``runtime_context.get_metrics_group().add_group("privstream")``), so they appear in
the Flink web UI, the REST API (``/jobs/<id>/vertices/<vid>/metrics``) and any configured reporter
(README, "Metrics"). Metric names are fixed strings: no item, key or other data ever reaches a
name, and the values are counts the operator already knows (how many events it counted, how many
messages it dead-lettered, …). Counting is a side effect only: no output depends on a metric.

Names (each operator registers the ones that apply to it; :data:`DESCRIPTIONS`):

* counters ``eventsCounted``, ``deadLettered``, ``epochsClosed``, ``releases``, ``refusals``;
* gauges ``epsilonSpentMicros`` (the ledger's spent ε × 10^6, rounded: PyFlink's Python gauges are
  integers) and ``stateBytes`` (the operator's keyed state written since the task (re)started, in
  bytes; summed over the keys the subtask holds).

PyFlink ships a Python operator's metrics to the JVM when a bundle finishes
(``python.fn-execution.bundle.time``, 200 ms in the jobs), so a value lags by at most one bundle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

GROUP = "privstream"

#: every metric name and what it counts (README's "Metrics" table says the same)
DESCRIPTIONS: dict[str, str] = {
    "eventsCounted": "events (reports for LDP, items for the sliding window) counted into the sketch",
    "deadLettered": "messages sent to the dead-letter topic (undecodable, late, misrouted, foreign)",
    "epochsClosed": "epochs (heavy hitters) or time steps (continual monitor) a shard/node closed",
    "releases": "releases written to the releases topic",
    "refusals": "releases refused (budget exhausted, or a refused input: fail closed)",
    "epsilonSpentMicros": "gauge: the privacy ledger's spent epsilon x 10^6",
    "stateBytes": "gauge: bytes of keyed state held by this subtask (written since its start)",
}

COUNTERS = ("eventsCounted", "deadLettered", "epochsClosed", "releases", "refusals")


class _NoCounter:
    """A counter that counts nothing (metrics disabled: ``python.metric.enabled: false``)."""

    def inc(self, n: int = 1) -> None:
        pass


class OperatorMetrics:
    """The counters an operator increments and the gauge values it sets.

    ``counters``: the counter names of :data:`COUNTERS` this operator registers; ``gauges``: gauge
    name → a callable returning its current integer value (evaluated by PyFlink when a bundle ends).
    """

    def __init__(self, group: Any, counters: Iterable[str], gauges: dict[str, Callable[[], int]]) -> None:
        self._counters: dict[str, Any] = {}
        for name in counters:
            if name not in COUNTERS:
                raise ValueError(f"unknown privstream counter {name!r}")
            self._counters[name] = _NoCounter() if group is None else group.counter(name)
        for name, value in gauges.items():
            if name not in DESCRIPTIONS or name in COUNTERS:
                raise ValueError(f"unknown privstream gauge {name!r}")
            if group is not None:
                group.gauge(name, value)

    @classmethod
    def register(
        cls,
        runtime_context: Any,
        counters: Iterable[str],
        gauges: dict[str, Callable[[], int]] | None = None,
    ) -> OperatorMetrics:
        """Register in ``runtime_context``'s metric group, subgroup ``privstream`` (no-op counters
        when the runtime has no metric group)."""
        try:
            group = runtime_context.get_metrics_group()
        except Exception:  # noqa: BLE001 - metrics disabled or a test double: count nothing
            group = None
        return cls(None if group is None else group.add_group(GROUP), counters, gauges or {})

    @classmethod
    def disabled(cls) -> OperatorMetrics:
        """Counters that count nothing, until ``open()`` registers the real ones (a function used
        without Flink, e.g. a test driving ``process_element`` with stub state)."""
        return cls(None, COUNTERS, {})

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` (> 0 only: a zero increment is skipped) to counter ``name``."""
        if n > 0:
            self._counters[name].inc(n)


def micros(epsilon: float) -> int:
    """``epsilon`` × 10^6, rounded: the integer value of the ``epsilonSpentMicros`` gauge."""
    return round(float(epsilon) * 1_000_000)
