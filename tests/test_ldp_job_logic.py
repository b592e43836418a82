"""The ``ldp-heavy-hitters`` job's Flink-free logic: releases per epoch, state messages, dead letters,
and a state that survives ``to_bytes`` (what the operator checkpoints)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.connectors.ldp_producer import report_to_record
from privstream.connectors.ldp_state import state_from_record
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings

from privstream.ldp import LdpReport, make_client
from privstream.noise.rng import SeededRandomSource

D, K = 100, 5


def _settings(**kwargs: object) -> LdpServerSettings:
    rnd = random.Random(0)
    warm = tuple(rnd.choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)], k=200))
    args = {"scheme": "cnr", "epsilon": 2.0, "domain_size": D, "k": K, "deployment": "d", "warm_up": warm}
    return LdpServerSettings(**(args | {"epoch_reports": 50, "state_every": 10} | kwargs))  # type: ignore[arg-type]


def test_releases_states_and_dead_letters_survive_a_restore() -> None:
    settings = _settings()
    logic = LdpServerLogic(settings)
    again = settings.initial_server()  # the launcher's copy: the same public version 0
    assert again.public_state() == logic.server.public_state() and again.public_state().version == 0
    client = make_client(settings.params, rng=SeededRandomSource(1))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    rnd = random.Random(2)
    outputs: list[tuple[str, bytes]] = []
    second_half_values: list[bytes] = []
    for offset in range(120):
        value = encode(
            "LdpReport",
            report_to_record(client.encode(rnd.choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)])[0])),
        )
        if offset > 60:
            second_half_values.append(value)
        new = logic.process(value, 0, offset, "reports")
        for kind, data in new:  # the client follows the published state, as over Kafka
            if kind == "state":
                client.update_state(state_from_record(decode(data)[1]))
        outputs += new
        if offset == 60:
            first_half = logic.to_bytes()
            second_half_start = len(outputs)
            logic = LdpServerLogic(settings, first_half)  # a restore from a checkpoint
    replay = LdpServerLogic(settings, first_half)  # a second restore from the same state ...
    replayed = [replay.process(v, 0, 61 + i, "reports") for i, v in enumerate(second_half_values)]

    def content(outs: list[tuple[str, bytes]]) -> list[dict]:
        records = [decode(data)[1] for kind, data in outs if kind != "dead-letter"]
        return [{k: v for k, v in r.items() if not k.endswith("_time")} for r in records]

    again_out = [out for outs in replayed for out in outs]
    assert content(again_out) == content(outputs[second_half_start:])  # replay-stable decays
    assert any(kind == "state" for kind, _ in again_out) and any(kind == "release" for kind, _ in again_out)
    kinds = Counter(kind for kind, _ in outputs)
    assert kinds["release"] == 2 and kinds["dead-letter"] == 0
    releases = [decode(v)[1] for kind, v in outputs if kind == "release"]
    assert [r["epoch"] for r in releases] == [1, 2] and [r["reports"] for r in releases] == [50, 100]
    assert all(
        len(r["items"]) == K and r["items"][0]["estimate"] >= r["items"][-1]["estimate"] for r in releases
    )
    assert "event-level" in releases[0]["privacy_unit"] and releases[0]["epsilon"] <= 2.0
    for kind, value in outputs:
        if kind == "state":
            assert decode(value)[0] == "HgLdpState" and state_from_record(decode(value)[1]).version > 0
    bad = [
        b"not avro",
        encode(
            "LdpReport",
            report_to_record(LdpReport("hg-cnr", client._canonical, b"\x01", state_version=10**6)),
        ),
        encode("LdpReport", report_to_record(LdpReport("hg-bdr", client._canonical, b"\x01"))),
    ]
    letters = [logic.process(v, 0, 500 + i, "reports") for i, v in enumerate(bad)]
    errors = [decode(out[0][1])[1]["error"].split(":")[0] for out in letters]
    assert errors == ["AvroDecodeError", "stale-state (unknown)", "rejected"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epoch_reports": 0}, "epoch_reports"),
        ({"warm_up": ()}, "warm_up"),
        ({"deployment": ""}, "deployment"),
        ({"k": 1}, "k"),
    ],
)
def test_bad_settings_fail_fast(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        _settings(**kwargs)
