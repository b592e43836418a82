"""The planner guard of the jobs' source and the SQL operator (operators/kafka_io.py): a plan that
fails with one of the two per-thread errors of a py4j gateway thread the environment was not set
up on is run once more; any other error, or a second failure, propagates. The real errors are
intermittent under load (they could not be forced here), so the plans are plain callables."""

from __future__ import annotations

import pytest

pytest.importorskip("pyflink")

from privstream.operators.kafka_io import planned_on_this_thread  # noqa: E402

NPE = "java.lang.NullPointerException: metadataHandlerProvider"


def _plan(errors: list[str]) -> tuple[list[int], object]:
    calls: list[int] = []

    def plan() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise RuntimeError(errors[len(calls) - 1])
        return "planned"

    return calls, plan


def test_a_per_thread_error_is_planned_once_more() -> None:
    calls, plan = _plan([NPE])
    assert planned_on_this_thread(plan, kafka=False) == "planned" and len(calls) == 2


def test_another_error_propagates_at_once() -> None:
    calls, plan = _plan(["Table 'events' not found"])
    with pytest.raises(RuntimeError, match="not found"):
        planned_on_this_thread(plan, kafka=False)
    assert len(calls) == 1


def test_a_second_failure_propagates() -> None:
    calls, plan = _plan([NPE, NPE])
    with pytest.raises(RuntimeError, match="metadataHandlerProvider"):
        planned_on_this_thread(plan, kafka=False)
    assert len(calls) == 2
