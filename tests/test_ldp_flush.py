"""The ``ldp-heavy-hitters`` operator keeps its HG-LDP server in memory (issue 25): a message
without output appends itself to a ``ListState`` and the server's states are written only after a
message with an output (a release, a public state, a dead letter) or every ``FLUSH_EVERY``
messages. A restore from any checkpoint emits exactly what a restore of the server as of that
checkpoint emits (the reference: the logic restored from its whole ``to_bytes`` at that point,
which is what the operator wrote after every message before).

The real operator body (:class:`~privstream.operators.ldp_operator.LdpServerFunction`) runs on
in-memory stand-ins of its Flink state (tests/test_several_bad_messages.py); a checkpoint is a deep
copy of that state, a restore a fresh function on the copy fed the messages after the checkpoint,
as Flink replays them from the checkpointed Kafka offsets. Deterministic: the clients are seeded and
the server's decays keyed.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from privstream.connectors.avro_codec import decode, encode
from privstream.connectors.ldp_producer import report_to_record
from privstream.connectors.ldp_state import state_from_record
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings
from privstream.operators.ldp_operator import STATE, LdpServerFunction
from privstream.operators.unflushed import FLUSH_EVERY, UnflushedMessages

from privstream.ldp import make_client
from privstream.noise.rng import SeededRandomSource
from tests.test_several_bad_messages import ContextStub, ListStateStub, ValueStateStub

D, K = 100, 5
Output = tuple[str, dict[str, Any]]


def _settings() -> LdpServerSettings:
    rnd = random.Random(0)
    warm = tuple(rnd.choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)], k=200))
    return LdpServerSettings(
        scheme="cnr", epsilon=2.0, domain_size=D, k=K, deployment="d", warm_up=warm,
        epoch_reports=150, state_every=100,
    )  # fmt: skip


def _messages(settings: LdpServerSettings) -> list[bytes]:
    """One report per message from a seeded client of version 0 (every state the server makes
    stays within its kept versions), and a malformed message (a dead letter) at 170."""
    client = make_client(settings.params, rng=SeededRandomSource(1))
    client.update_state(settings.initial_server().public_state())
    rnd = random.Random(2)
    values = rnd.choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)], k=320)
    out = [encode("LdpReport", report_to_record(client.encode(v))) for v in values]
    out.insert(170, b"not avro")
    return out


def _comparable(kind: str, data: bytes) -> Output:
    record = dict(decode(data)[1])
    for name in ("release_time", "created_time", "failed_time", "published_time"):
        record.pop(name, None)
    return kind, record


def _function(settings: LdpServerSettings, state: dict[str, Any] | None = None) -> LdpServerFunction:
    """The operator on stub state (``state``: a checkpoint's copy), as ``open()`` leaves it."""
    f = LdpServerFunction(settings, "reports")
    state = state or {"core": ValueStateStub(), "versions": ValueStateStub(), "since": ListStateStub()}
    f.core, f.versions, f.since = state["core"], state["versions"], UnflushedMessages(state["since"])
    f._logic, f._written = None, -1
    return f


def _state_of(f: LdpServerFunction) -> dict[str, Any]:
    return copy.deepcopy({"core": f.core, "versions": f.versions, "since": f.since.state})


def _feed(f: LdpServerFunction, messages: list[bytes], first_offset: int = 0) -> list[Output]:
    out: list[Output] = []
    for offset, message in enumerate(messages, start=first_offset):
        for item in f.process_element((message, 0, offset), ContextStub()):
            if isinstance(item, tuple):
                tag, data = item
                out.append(
                    _comparable("state", data[1]) if tag is STATE else _comparable("dead-letter", data)
                )
            else:
                out.append(_comparable("release", item))
    return out


def _logic_outputs(logic: LdpServerLogic, messages: list[bytes], first_offset: int) -> list[Output]:
    return [
        _comparable(kind, data)
        for offset, m in enumerate(messages, start=first_offset)
        for kind, data in logic.process(m, 0, offset, "reports")
    ]


def test_a_restore_from_any_checkpoint_emits_what_the_checkpointed_server_emits() -> None:
    settings = _settings()
    messages = _messages(settings)
    live = _function(settings)
    reference_logic = LdpServerLogic(settings)  # the same server, fed directly
    emitted: list[Output] = []
    checkpoints: dict[int, tuple[dict[str, Any], bytes]] = {}
    for i, message in enumerate(messages):
        checkpoints[i] = (_state_of(live), reference_logic.to_bytes())  # a checkpoint before message i
        emitted += _feed(live, [message], i)
        _logic_outputs(reference_logic, [message], i)
    assert _logic_outputs(LdpServerLogic(settings), messages, 0) == emitted  # the in-memory path alone
    kinds = [kind for kind, _ in emitted]
    assert kinds.count("release") == 2 and kinds.count("dead-letter") == 1 and kinds.count("state") >= 3
    lengths = [len(s[0]["since"].get()) for s in checkpoints.values()]
    assert max(lengths) == FLUSH_EVERY - 1  # a run of messages without output reached the bound
    positions = {1, 2, 63, 64, 65, 170, 171, 250, *(i for i, n in enumerate(lengths) if n == FLUSH_EVERY - 1)}
    for i in sorted(positions):
        state, whole = checkpoints[i]
        expected = _logic_outputs(LdpServerLogic(settings, whole), messages[i:], i)
        assert expected[0][0] == "state"  # every restore re-announces the latest state first
        assert _feed(_function(settings, copy.deepcopy(state)), messages[i:], i) == expected, i


def test_a_message_without_output_writes_only_itself() -> None:
    """Between writes the server's states are untouched: after the first message (the announcement,
    written) FLUSH_EVERY − 1 reports without output append themselves and write nothing; the next
    one writes the core state once and empties the list."""
    settings = _settings()
    messages = _messages(settings)[: FLUSH_EVERY + 1]
    f = _function(settings)
    writes: list[int] = []
    update = f.core.update
    f.core.update = lambda value: (writes.append(len(value)), update(value))  # type: ignore[method-assign]
    first = _feed(f, messages[:1])
    assert [kind for kind, _ in first] == ["state"] and len(writes) == 1
    assert state_from_record(first[0][1]).version == 0
    assert _feed(f, messages[1:FLUSH_EVERY], 1) == []
    assert (len(writes), len(f.since.state.get())) == (1, FLUSH_EVERY - 1)
    assert _feed(f, messages[FLUSH_EVERY:], FLUSH_EVERY) == []
    assert (len(writes), len(f.since.state.get())) == (2, 0)
