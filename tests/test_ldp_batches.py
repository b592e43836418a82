"""Batched LDP (issue 25): the vectorised client randomisers have exactly the scalar ones' output
distribution, a report batch round-trips, and the server logic on batch messages gives the
releases and states of the same reports sent one per message (same noise key), with the batch
dead-letter policy of :mod:`privstream.operators.ldp_logic`."""

from __future__ import annotations

import bisect
import random
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.connectors.ldp_producer import (
    batch_from_record,
    batch_to_record,
    report_to_record,
)
from privstream.connectors.ldp_state import state_from_record
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings
from scipy import stats

from privstream.ldp import SCHEMES, GeneralizedRandomizedResponse, HgLdpParams, PublicState, make_client
from privstream.ldp.grr import int_indices
from privstream.ldp.hadamard import HadamardResponse
from privstream.ldp.hg_clients import cold_item, cold_items, hot_positions
from privstream.ldp.olh import OptimisedLocalHashing
from privstream.ldp.randomiser import (
    FrequencyAggregator,
    LdpReport,
    LdpReportBatch,
    LocalRandomiser,
    pack_outputs,
    unpack_outputs,
)
from privstream.noise.rng import SeededRandomSource

D, K, EPS, ALPHA = 10, 3, 1.5, Fraction(1, 3)
HOT = (2, 5, 7)
DRAWS = 20_000
LEVEL = 1e-4  # upper tail per chi-square test


def _chi_square_ok(draws: np.ndarray, dist: dict[int, Fraction]) -> bool:
    outputs = sorted(dist)
    assert set(np.unique(draws).tolist()) <= set(outputs), "an impossible output"
    if len(outputs) == 1:
        return bool((draws == outputs[0]).all())
    observed = np.array([(draws == y).sum() for y in outputs])
    expected = np.array([float(dist[y]) for y in outputs]) * draws.size
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return statistic < stats.chi2.ppf(1 - LEVEL, df=len(outputs) - 1)


# --- the vectorised randomisers ------------------------------------------------------------------


def test_vectorised_grr_matches_the_exact_distribution() -> None:
    """Inputs 0 and d−1 of d = 6 and of d = 2, 20k reports each: chi-square against p, q (4 tests
    at the 1e-4 upper tail: false-failure rate ≤ 4e-4; seeded, so it is fixed)."""
    for d in (6, 2):
        grr = GeneralizedRandomizedResponse(1.0, d, rng=SeededRandomSource(f"grr-{d}"))
        for v in (0, d - 1):
            dist = {j: grr.p if j == v else grr.q for j in range(d)}
            assert _chi_square_ok(grr.randomise_indices(np.full(DRAWS, v)), dist), (d, v)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_vectorised_hg_clients_match_the_exact_distribution(scheme: str) -> None:
    """Every HG-LDP client's ``randomise_indices`` against its exact ``output_distribution``: a hot
    (2) and a cold (4) input, both flags (DSR both modes, BDR's M3 and ⊥ branches), 20k reports
    each, chi-square at the 1e-4 upper tail (4 tests per scheme, 16 in all: false-failure rate
    ≤ 1.6e-3; seeded, so the outcome is fixed)."""
    client = make_client(HgLdpParams(scheme, EPS, D, K, alpha=ALPHA), rng=SeededRandomSource(f"v-{scheme}"))
    for state in (PublicState(0, HOT, True), PublicState(1, HOT, False)):
        for v in (2, 4):
            draws = client.randomise_indices(np.full(DRAWS, v, dtype=np.int64), state)
            assert _chi_square_ok(draws, client.output_distribution(v, state)), (state, v)


def test_mixed_inputs_keep_their_own_distribution_and_order() -> None:
    """One batch of interleaved hot and cold inputs (CNR, both branches in one call): each lane
    follows its own input's law, so the lanes of input 2 and of input 4 each pass the chi-square
    test (2 tests at 1e-4); a lane is never another lane's output."""
    client = make_client(HgLdpParams("cnr", EPS, D, K, alpha=ALPHA), rng=SeededRandomSource("mixed"))
    state = PublicState(0, HOT, False)
    inputs = np.tile(np.array([2, 4], dtype=np.int64), DRAWS)
    out = client.randomise_indices(inputs, state)
    for v in (2, 4):
        assert _chi_square_ok(out[inputs == v], client.output_distribution(v, state)), v


def test_grr_beyond_the_bulk_bound_takes_the_scalar_path_exactly() -> None:
    """W = a + 2^40·(d−1) > 2^63 (d = 2^23 + 1): every report is the scalar ``randomise_index``,
    draw for draw (same seeded source, same outputs)."""
    d = 2**23 + 1
    values = np.array([0, 5, d - 1, 17, 2**22], dtype=np.int64)
    vectorised = GeneralizedRandomizedResponse(1.0, d, rng=SeededRandomSource(7)).randomise_indices(values)
    scalar = GeneralizedRandomizedResponse(1.0, d, rng=SeededRandomSource(7))
    assert vectorised.tolist() == [scalar.randomise_index(int(v)) for v in values]


def test_seeded_batches_are_reproducible_and_edge_cases() -> None:
    params = HgLdpParams("bdr", EPS, D, K, alpha=ALPHA)
    state = PublicState(4, HOT, False, b"run")
    batches = []
    for _ in range(2):
        client = make_client(params, rng=SeededRandomSource("edge"))
        client.update_state(state)
        batches.append(client.encode_many(np.arange(D)))
    assert batches[0].payloads == batches[1].payloads and batches[0].count == D
    batch = batches[0]
    assert (batch.state_version, batch.state_digest) == (4, state.digest)  # the batch names ONE state
    assert set(batch.outputs()) == {*HOT, D}  # BDR, no eviction due: M2 on H or ⊥ (= d), never D∖H
    assert [r.payload for r in batch.reports()] == [bytes([y]) for y in batch.outputs()]
    client = make_client(params, rng=SeededRandomSource(1))
    client.update_state(state)
    with pytest.raises(ValueError, match="withheld") as info:
        client.encode_many([1, 2, D + 12345])
    assert "12345" not in str(info.value)
    for bad in ([True], [1.0], np.array([-1]), np.array([D])):
        with pytest.raises(ValueError, match="withheld"):
            client.encode_many(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        client.encode_many([])
    with pytest.raises(RuntimeError, match="no public state"):
        make_client(params).encode_many([1])
    # GRR on an item domain: values are items, reported by index; a batch of one
    grr = GeneralizedRandomizedResponse(2.0, ["a", "b", "c"], rng=SeededRandomSource(3))
    one = grr.encode_many(["c"])
    assert one.count == 1 and one.width == 1 and one.outputs()[0] in (0, 1, 2)
    assert all(grr.accepts(r) for r in one.reports())


def test_payload_packing_round_trips_every_width() -> None:
    for width, top in ((1, 255), (2, 65_535), (3, 2**24 - 1), (8, 2**63 - 1), (9, 2**70)):
        outputs = [0, 1, top, top // 3]
        packed = pack_outputs(np.array(outputs, dtype=object if top >= 2**63 else np.int64), width)
        assert packed == b"".join(y.to_bytes(width, "big") for y in outputs)
        assert unpack_outputs(packed, width) == outputs


def test_batch_record_round_trip_and_checks() -> None:
    client = make_client(HgLdpParams("cnr", EPS, D, K, alpha=ALPHA), rng=SeededRandomSource(2))
    client.update_state(PublicState(3, HOT, True, b"run"))
    batch = client.encode_many([1, 2, 3, 4, 9])
    schema, record = decode(encode("LdpReportBatch", batch_to_record(batch)))
    assert schema == "LdpReportBatch" and batch_from_record(record) == batch
    with pytest.raises(TypeError, match="only LdpReportBatch"):
        batch_to_record(next(batch.reports()))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not 3 payloads"):
        LdpReportBatch("hg-cnr", batch.parameters, b"\x01\x02", 3)
    with pytest.raises(ValueError, match="at least one"):
        LdpReportBatch("hg-cnr", batch.parameters, b"", 0)


# --- exact outputs, types and edge cases of the batch paths ------------------------------------------


def test_int_indices_reads_integer_arrays_of_any_type_and_shape_as_int64() -> None:
    """An integer array (any integer dtype, any shape: read in C order) or a sequence of ints (numpy
    ints included) gives an int64 array of the same values; an empty one an empty int64 array."""
    for dtype in (np.int8, np.uint8, np.int32, np.uint64, np.int64):
        out = int_indices(np.array([0, 9, 3], dtype=dtype), D)
        assert out.dtype == np.int64 and out.tolist() == [0, 9, 3]
    grid = int_indices(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32), D)
    assert grid.dtype == np.int64 and grid.tolist() == [1, 2, 3, 4, 5, 6]
    for values in ([0, 9, np.int64(3)], (0, 9, 3)):
        out = int_indices(values, D)
        assert out.dtype == np.int64 and out.tolist() == [0, 9, 3]
    for empty in ([], np.array([], dtype=np.int64)):
        out = int_indices(empty, D)
        assert out.dtype == np.int64 and out.shape == (0,)


@pytest.mark.parametrize(
    "bad",
    [
        [D],
        [-1],
        [True],
        [1.0],
        ["1"],
        np.array([D]),
        np.array([-1]),
        np.array([True, False]),
        np.array([1.0, 2.0]),
        np.array(["1"]),
        np.array([D], dtype=np.uint64),
    ],
    ids=repr,
)
def test_int_indices_refuses_whatever_is_not_an_item_without_echoing_it(bad: Any) -> None:
    """Items are the ints 0..d−1 (d = 10 here: d itself is outside); bools, floats and strings are
    refused in a list and as an array (a float or bool array is not an integer array)."""
    with pytest.raises(ValueError) as info:
        int_indices(bad, D)
    assert str(info.value) == f"value: not in the domain 0..{D - 1} (value withheld)"


def test_grr_batches_on_an_int_domain_are_its_vectorised_outputs() -> None:
    """GRR on 0..d−1: encode_many of a list or an array is randomise_indices of those values from the
    same seeded source, packed at the report width, and every report is one GRR report; values
    outside the domain are refused; indices_of gives int64 on both kinds of domain, also when empty."""
    values = [0, 5, 3, 3, 1, 4, 2, 5]
    want = GeneralizedRandomizedResponse(1.5, 6, rng=SeededRandomSource(8)).randomise_indices(
        np.array(values)
    )
    for given in (values, np.array(values, dtype=np.int32)):
        grr = GeneralizedRandomizedResponse(1.5, 6, rng=SeededRandomSource(8))
        batch = grr.encode_many(given)
        assert batch.count == len(values) and batch.outputs() == want.tolist()
        assert batch.payloads == bytes(want.tolist()) and (batch.state_version, batch.state_digest) == (
            0,
            b"",
        )
        assert all(grr.accepts(r) for r in batch.reports())
        assert [grr.decode_index(r) for r in batch.reports()] == want.tolist()
    sized = GeneralizedRandomizedResponse(1.5, 6, rng=SeededRandomSource(8))
    assert sized.indices_of(np.array([5, 0])).tolist() == [5, 0]
    for bad in ([6], np.array([6]), [-1]):
        with pytest.raises(ValueError, match="withheld"):
            sized.encode_many(bad)  # type: ignore[arg-type]
    items = GeneralizedRandomizedResponse(1.5, ["a", "b", 7])
    assert items.indices_of([7, "a"]).tolist() == [2, 0]
    for grr in (sized, items):
        empty = grr.indices_of([])
        assert empty.dtype == np.int64 and empty.shape == (0,)


@pytest.mark.parametrize("make", [OptimisedLocalHashing, HadamardResponse])
def test_the_default_encode_many_is_one_encode_per_value(make: type) -> None:
    """OLH and HR batch with LocalRandomiser.encode_many: exactly the reports of one encode call per
    value from the same seeded source, in order, under their one header (stateless: version 0, no
    digest); a batch of one value works; an empty batch and values outside the domain are refused."""
    values = [0, 9, 4, 4, 7]
    twin = make(1.5, 10, rng=SeededRandomSource("twin"))
    singles = [twin.encode(v) for v in values]
    oracle = make(1.5, 10, rng=SeededRandomSource("twin"))
    batch = oracle.encode_many(values)
    assert (batch.scheme, batch.parameters) == (singles[0].scheme, singles[0].parameters)
    assert batch.count == len(values) and batch.payloads == b"".join(r.payload for r in singles)
    assert (batch.state_version, batch.state_digest) == (0, b"")
    assert [r.payload for r in batch.reports()] == [r.payload for r in singles]
    assert all(oracle.accepts(r) for r in batch.reports())
    one = make(1.5, 10, rng=SeededRandomSource("one")).encode_many([3])
    assert one.count == 1 and one.payloads == make(1.5, 10, rng=SeededRandomSource("one")).encode(3).payload
    with pytest.raises(ValueError, match="at least one"):
        oracle.encode_many([])
    with pytest.raises(ValueError, match="withheld"):
        oracle.encode_many([1, 10])
    for dtype in (np.int64, np.int32, np.uint16):  # an integer array batches like the list
        array = make(1.5, 10, rng=SeededRandomSource("twin")).encode_many(np.array(values, dtype=dtype))
        assert array.payloads == batch.payloads
    for bad in (np.array([1.0, 2.0]), np.array([True, False])):  # not ints: refused, not echoed
        with pytest.raises(ValueError, match="withheld"):
            oracle.encode_many(bad)


class _Toy(LocalRandomiser):
    """A stateful randomiser for LocalRandomiser.encode_many's contract: value v is sent as v zero
    bytes against state (version, digest) = ``state`` (no randomisation: only the batching is tested)."""

    scheme = "toy"

    def __init__(self, state: tuple[int, bytes] = (3, b"digest")) -> None:
        self.state = state

    @property
    def parameters(self) -> dict[str, str]:
        return {"n": "1"}

    def encode(self, value: Any) -> LdpReport:
        return LdpReport(
            "toy", (("n", "1"),), bytes(value), state_version=self.state[0], state_digest=self.state[1]
        )

    def new_aggregator(self) -> FrequencyAggregator:
        raise NotImplementedError


def test_the_default_encode_many_names_the_reports_state_and_refuses_mixed_ones() -> None:
    batch = _Toy().encode_many([2, 2, 2])
    assert (batch.scheme, batch.parameters, batch.payloads, batch.count) == (
        "toy",
        (("n", "1"),),
        bytes(6),
        3,
    )
    assert (batch.state_version, batch.state_digest) == (3, b"digest")
    with pytest.raises(ValueError, match="differ in state or payload width"):
        _Toy().encode_many([2, 2, 1])  # another payload width

    class Drifting(_Toy):
        def encode(self, value: Any) -> LdpReport:
            report = super().encode(value)
            self.state = (self.state[0] + 1, self.state[1])  # a state update between two reports
            return report

    with pytest.raises(ValueError, match="differ in state"):
        Drifting().encode_many([1, 1])


def test_an_hg_batch_without_a_state_read_has_version_zero_and_no_digest() -> None:
    client = make_client(HgLdpParams("bgr", EPS, D, K, alpha=ALPHA), rng=SeededRandomSource(2))
    batch = client.encode_many([4, 0, 9])
    assert (batch.state_version, batch.state_digest) == (0, b"")
    assert batch.count == 3 and all(0 <= y < D for y in batch.outputs())


@pytest.mark.parametrize("scheme", ["dsr", "bdr", "cnr"])
def test_state_dependent_batches_use_the_state_read_last(scheme: str) -> None:
    """Without a state read, a batch is refused (as a single report is); randomise_indices(…, None)
    after update_state is randomise_indices(…, that state) from the same seeded source."""
    params = HgLdpParams(scheme, EPS, D, K, alpha=ALPHA)
    client = make_client(params, rng=SeededRandomSource(6))
    with pytest.raises(RuntimeError, match="no public state"):
        client.encode_many([1])
    with pytest.raises(RuntimeError, match="no public state"):
        client.randomise_indices(np.array([1]), None)
    for state in (PublicState(2, HOT, True), PublicState(3, HOT, False)):
        twin = make_client(params, rng=SeededRandomSource(6))
        again = make_client(params, rng=SeededRandomSource(6))
        again.update_state(state)
        values = np.arange(D, dtype=np.int64).repeat(3)
        assert (
            again.randomise_indices(values, None).tolist() == twin.randomise_indices(values, state).tolist()
        )


@pytest.mark.parametrize("scheme", SCHEMES)
def test_hg_batches_are_int64_whatever_integer_type_the_hot_items_have(scheme: str) -> None:
    """A state whose hot items are numpy int32s (e.g. read from an int32 array) gives the same int64
    outputs, draw for draw, as the same state with Python ints."""
    params = HgLdpParams(scheme, EPS, D, K, alpha=ALPHA)
    values = np.arange(D, dtype=np.int64).repeat(5)
    for weakest_low in (True, False):
        outputs = []
        for hot in (HOT, tuple(np.array(HOT, dtype=np.int32))):
            client = make_client(params, rng=SeededRandomSource("hot-types"))
            out = client.randomise_indices(values, PublicState(1, hot, weakest_low))
            assert out.dtype == np.int64
            outputs.append(out.tolist())
        assert outputs[0] == outputs[1]


@pytest.mark.parametrize("hot", [(0,), (9,), (2, 5, 7), (0, 1, 2), (7, 8, 9), (0, 4, 9), (1, 3, 4, 6, 8)])
def test_hot_positions_and_cold_items_are_the_scalar_maps(hot: tuple[int, ...]) -> None:
    """hot_positions is bisect_left with the membership test, at every item of D = 0..9 (the first
    and last hot item included), and cold_items is cold_item of every rank of D∖H; both without any
    numpy warning (no deprecated call)."""
    hot_array = np.array(hot, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pos, is_hot = hot_positions(np.arange(D, dtype=np.int64), hot_array)
        ranks = np.arange(D - len(hot), dtype=np.int64)
        cold = cold_items(ranks, hot_array)
    assert pos.tolist() == [bisect.bisect_left(hot, v) for v in range(D)]
    assert is_hot.tolist() == [v in hot for v in range(D)]
    assert (
        cold.tolist() == [cold_item(r, hot) for r in ranks.tolist()] == [v for v in range(D) if v not in hot]
    )


# --- the server logic on batch messages ----------------------------------------------------------

LOGIC_D, LOGIC_K = 100, 5


def _settings(scheme: str = "cnr", **kwargs: Any) -> LdpServerSettings:
    rnd = random.Random(0)
    weights = [1 / (i + 1) ** 1.5 for i in range(LOGIC_D)]
    warm = tuple(rnd.choices(range(LOGIC_D), weights, k=200))
    args = {"scheme": scheme, "epsilon": 2.0, "domain_size": LOGIC_D, "k": LOGIC_K, "deployment": "d"}
    return LdpServerSettings(warm_up=warm, **(args | {"epoch_reports": 50, "state_every": 10} | kwargs))


def _strip(kind: str, data: bytes) -> tuple[str, Any]:
    """An output without its wall-clock time."""
    record = dict(decode(data)[1])
    for key in ("release_time", "published_time", "failed_time"):
        record.pop(key, None)
    return kind, record


def _batched_stream(settings: LdpServerSettings, sizes: list[int]) -> tuple[list[bytes], list[list[bytes]]]:
    """Batches of ``sizes`` from a client that follows the states the batched server publishes
    (refreshing between batches), and each batch as its reports one per message."""
    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource("clients"))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    rnd = random.Random(5)
    weights = [1 / (i + 1) ** 1.2 for i in range(LOGIC_D)]
    batches, singles = [], []
    for offset, size in enumerate(sizes):
        batch = client.encode_many(rnd.choices(range(LOGIC_D), weights, k=size))
        message = encode("LdpReportBatch", batch_to_record(batch))
        batches.append(message)
        singles.append([encode("LdpReport", report_to_record(r)) for r in batch.reports()])
        for kind, data in logic.process(message, 0, offset, "reports"):
            if kind == "state":
                client.update_state(state_from_record(decode(data)[1]))
    return batches, singles


@pytest.mark.parametrize("scheme", SCHEMES)
def test_batched_releases_equal_one_report_per_message(scheme: str) -> None:
    """The same reports, in batches of 1..173 (crossing state and epoch boundaries mid-batch, several
    epochs in one batch) or one per message, through two servers with the same noise key: equal
    releases and equal states, in the same order, and the same server afterwards."""
    settings = _settings(scheme)
    sizes = [1, 7, 50, 113, 3, 173, 2, 64, 40]
    batches, singles = _batched_stream(settings, sizes)
    batched, single = LdpServerLogic(settings), LdpServerLogic(settings)
    out_batched = [o for i, m in enumerate(batches) for o in batched.process(m, 0, i, "reports")]
    out_single = [o for i, ms in enumerate(singles) for m in ms for o in single.process(m, 0, i, "reports")]
    assert batched.server.n == single.server.n == sum(sizes)
    releases = [_strip(*o) for o in out_batched if o[0] == "release"]
    assert len(releases) == sum(sizes) // 50 == 9
    assert releases == [_strip(*o) for o in out_single if o[0] == "release"]
    # states: the same versions and contents, each published at the same report count
    states = [_strip(*o) for o in out_batched if o[0] == "state"]
    assert states == [_strip(*o) for o in out_single if o[0] == "state"]
    assert not [o for o in out_batched if o[0] == "dead-letter"]
    assert batched.core_bytes() == single.core_bytes()
    assert batched.versions_bytes() == single.versions_bytes()


def test_a_restored_batched_server_replays_identically() -> None:
    """Checkpoint after some batches, restore twice, replay the rest: identical outputs (the
    decays are keyed by the report number, not by the message)."""
    settings = _settings()
    batches, _ = _batched_stream(settings, [30, 45, 80, 25, 60])
    logic = LdpServerLogic(settings)
    for i, m in enumerate(batches[:2]):
        logic.process(m, 0, i, "reports")
    checkpoint = logic.to_bytes()
    replays = []
    for _ in range(2):
        restored = LdpServerLogic(settings, checkpoint)
        replays.append(
            [_strip(*o) for i, m in enumerate(batches[2:]) for o in restored.process(m, 0, i, "reports")]
        )
    assert replays[0] == replays[1] and any(kind == "release" for kind, _ in replays[0])


def _dead_letters(outputs: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [decode(data)[1] for kind, data in outputs if kind == "dead-letter"]


def _record(settings: LdpServerSettings, logic: LdpServerLogic, **changes: Any) -> dict[str, Any]:
    client = make_client(settings.params, rng=SeededRandomSource("bad"))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    return batch_to_record(client.encode_many(list(range(6)))) | changes


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"scheme": "hg-bdr"}, "batch: rejected: report: not produced by this scheme"),
        ({"parameters": {"k": "6"}}, "batch: rejected: report: not produced by this scheme"),
        ({"count": 4}, "batch: rejected: payloads: 6 bytes are not 4 payloads"),
        ({"count": 3}, "batch: rejected: report: payload must be 1 bytes, got 2"),
        ({"count": 0}, "batch: rejected: count: a batch holds at least one report"),
        ({"state_version": 9}, "batch: stale-state (unknown)"),
        ({"state_digest": b""}, "batch: state digest mismatch"),
        ({"state_digest": bytes(16)}, "batch: state digest mismatch"),
    ],
)
def test_a_refused_batch_is_one_dead_letter_with_its_bytes(changes: dict[str, Any], reason: str) -> None:
    settings = _settings()
    logic = LdpServerLogic(settings)
    message = encode("LdpReportBatch", _record(settings, logic, **changes))
    letters = _dead_letters(logic.process(message, 3, 77, "reports"))
    assert len(letters) == 1 and logic.server.n == 0
    assert letters[0]["original_value"] == message and letters[0]["error"].startswith(reason)
    assert (letters[0]["partition"], letters[0]["offset"], letters[0]["topic"]) == (3, 77, "reports")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [(LOGIC_D, "inconsistent: report: ⊥ is only sent by BDR"), (LOGIC_D + 1, "rejected: report: output 101")],
)
def test_a_refused_report_inside_a_batch_is_dead_lettered_by_index(bad: int, reason: str) -> None:
    """A CNR batch whose reports 2 and 4 are ⊥ or outside the domain: those two are dead-lettered
    (batch bytes + index), the other four applied in order."""
    settings = _settings()
    logic = LdpServerLogic(settings)
    record = _record(settings, logic)
    payloads = bytearray(record["payloads"])
    payloads[2] = payloads[4] = bad
    message = encode("LdpReportBatch", record | {"payloads": bytes(payloads)})
    letters = _dead_letters(logic.process(message, 0, 5, "reports"))
    assert logic.server.n == 4  # (the refusals were counted, then reset by the first message's announcement)
    assert [letter["error"].split(":", 1)[0] for letter in letters] == [
        "report 2 of 6 in the batch",
        "report 4 of 6 in the batch",
    ]
    assert all(reason in letter["error"] and letter["original_value"] == message for letter in letters)


def test_refused_batches_count_every_report_towards_the_re_announcement() -> None:
    """A batch against a state this run never made refuses all its reports: with state_every = 10
    one batch of 12 such reports triggers the re-announcement of the latest state."""
    settings = _settings()
    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource(4))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    first = logic.process(encode("LdpReportBatch", batch_to_record(client.encode_many([1]))), 0, 0, "r")
    assert [kind for kind, _ in first] == ["state"]  # the first message re-announces
    client.update_state(PublicState(5, (1, 2, 3, 4, 6), False, b"another run"))
    out = logic.process(
        encode("LdpReportBatch", batch_to_record(client.encode_many(list(range(12))))), 0, 1, "r"
    )
    assert [kind for kind, _ in out] == ["state", "dead-letter"] and logic.refused == 0


def test_other_schemas_are_rejected_whole() -> None:
    settings = _settings()
    logic = LdpServerLogic(settings)
    message = encode("EventBatch", {"events": []})
    [letter] = _dead_letters(logic.process(message, 0, 0, "r"))
    assert letter["error"] == "rejected: not an LdpReport (EventBatch)"
