"""HG-LDP server (docs/ldp.md, "Checks"): unbiasedness with a frozen heavy set, DSR bookkeeping
equivalence, the non-private limits, state versions, inconsistent reports, CNR nomination."""

from __future__ import annotations

import dataclasses
import math
import random
from fractions import Fraction

import pytest

from privstream.ldp import (
    SCHEMES,
    HeavyGuardian,
    HgLdpParams,
    HgLdpServer,
    InconsistentReportError,
    LdpReport,
    PublicState,
    StaleStateError,
    StateDigestError,
    StateHistory,
    make_client,
    refusal_reason,
)
from privstream.ldp.hg_debias import WARM_UP, DebiasedHeavyPart, Phase
from privstream.noise.rng import SeededRandomSource

FROZEN = 10**6
D_FROZEN, K_FROZEN, N_FROZEN = 30, 4, 20_000
TRUTH = {0: 4000, 1: 2500, 2: 1000, 3: 0}


def _frozen(scheme: str, seed: int) -> tuple[HgLdpParams, HgLdpServer, list[int], Fraction]:
    """d = 30, k = 4, ε = 2: a server whose heavy cells hold TRUTH's items at 10^6 (ED never
    decays them: b^−10^6 ≈ 0), statistics started with the exact γ_h, and a shuffled stream of
    N = 20k items with TRUTH's counts (the rest uniform over the cold items)."""
    rnd = random.Random(seed)
    hot_reports = sum(TRUTH.values())
    stream = [h for h, c in TRUTH.items() for _ in range(c)]
    stream += [rnd.randrange(K_FROZEN, D_FROZEN) for _ in range(N_FROZEN - hot_reports)]
    rnd.shuffle(stream)
    gamma = Fraction(hot_reports, N_FROZEN)
    params = HgLdpParams(scheme, 2.0, D_FROZEN, K_FROZEN)  # type: ignore[arg-type]
    server = HgLdpServer(params, gamma_h=gamma, rng=SeededRandomSource(f"srv-{scheme}-{seed}"))
    server.warm_start(dict.fromkeys(TRUTH, FROZEN))
    server.start_statistics()
    return params, server, stream, gamma


def _run(server: HgLdpServer, client, stream: list[int]) -> None:  # type: ignore[no-untyped-def]
    for v in stream:
        client.update_state(server.public_state())
        server.add(client.encode(v))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_unbiased_with_frozen_heavy_set(scheme: str) -> None:
    """Heavy cells pre-loaded at 10^6 (ED never decays them: b^−10^6 ≈ 0), N = 20k
    reports on d = 30, k = 4, ε = 2, exact γ_h. Each f̂_h − 10^6 is within 4.5 sd of the true f_h
    (sd from the exact variance; BDR/CNR: the Bernoulli-sum variance behind Thm 4.2). 4 items × 4 schemes at
    6.8e-6 each: false-failure rate ≤ 1.1e-4 (normal approximation); seeded."""
    k, n, truth = K_FROZEN, N_FROZEN, TRUTH
    params, server, stream, gamma = _frozen(scheme, 5)
    _run(server, make_client(params, rng=SeededRandomSource(f"cl-{scheme}")), stream)
    assert server.n == n and set(server.heavy.items()) == set(truth)
    estimates = server.estimates_exact()
    for h, f in truth.items():
        if scheme in ("bgr", "dsr"):
            p, q = params.grr_full if scheme == "bgr" else params.grr_shrunk
            var = (f * p * (1 - p) + (n - f) * q * (1 - q)) / (p - q) ** 2
        else:
            p1, q1 = params.m1
            p2, q2 = params.m2
            a, b, c = p1 * p2, p1 * q2, q1 / k
            var = (f * a * (1 - a) + (gamma * n - f) * b * (1 - b) + (1 - gamma) * n * c * (1 - c)) / (
                p1 * (p2 - q2)
            ) ** 2
        error = float(estimates[h]) - FROZEN - f
        assert abs(error) <= 4.5 * math.sqrt(float(var)), (scheme, h, error, math.sqrt(float(var)))


def _switch_form(events: list[tuple], warm: dict[int, int], phases: dict[str, Phase]) -> dict[int, Fraction]:
    """App. A.5's DSR_Insert: counts in the current mechanism's units, rescaled at each switch
    C ← ((C − n_A·q_A)/(p_A − q_A))·(p_B − q_B); a new item enters with 1 − (earlier offsets)."""
    counts = {h: Fraction(c) for h, c in warm.items()}
    phase, n_cur, earlier = WARM_UP, 0, Fraction(0)
    for mode, kind, item, new in events:
        nxt = phases[mode]
        if nxt != phase:
            counts = {h: (c - n_cur * phase.offset) / phase.scale * nxt.scale for h, c in counts.items()}
            earlier += n_cur * phase.offset / phase.scale
            phase, n_cur = nxt, 0
        n_cur += 1
        if kind == "hit":
            counts[item] += 1
        elif kind == "decay":
            counts[item] -= 1
        elif kind == "replace":
            del counts[item]
            counts[new] = 1 - earlier * phase.scale
    return {h: (c - n_cur * phase.offset) / phase.scale for h, c in counts.items()}


def _per_report_form(
    events: list[tuple], warm: dict[int, int], phases: dict[str, Phase]
) -> dict[int, Fraction]:
    """The released code's per-report form: counts in units of s_ref = p_s − q_s; every report
    subtracts o·s_ref/s from every count, a hit adds s_ref/s; a new item enters with
    s_ref/s − (all offsets so far); the response divides by s_ref."""
    ref = phases["shrunk"].scale
    counts = {h: Fraction(c) * ref for h, c in warm.items()}
    offset_so_far = Fraction(0)
    for mode, kind, item, new in events:
        phase = phases[mode]
        step = phase.offset * ref / phase.scale
        counts = {h: c - step for h, c in counts.items()}
        offset_so_far += step
        if kind == "hit":
            counts[item] += ref / phase.scale
        elif kind == "decay":
            counts[item] -= ref / phase.scale
        elif kind == "replace":
            del counts[item]
            counts[new] = ref / phase.scale - offset_so_far
    return {h: c / ref for h, c in counts.items()}


def _phase_sum(events: list[tuple], warm: dict[int, int], phases: dict[str, Phase]) -> dict[int, Fraction]:
    """The closed form f̂_h = Σ_φ (ΔC_h^φ − n^φ·o^φ)/s^φ over maximal runs of one mode (raw count 0
    before an item's insertion; the warm-up is a phase with o = 0, s = 1)."""
    runs: list[tuple[Phase, int, dict[int, int]]] = [(WARM_UP, 0, dict(warm))]
    alive = set(warm)
    for mode, kind, item, new in events:
        if runs[-1][0] != phases[mode]:
            runs.append((phases[mode], 0, {}))
        phase, n, delta = runs[-1]
        runs[-1] = (phase, n + 1, delta)
        if kind in ("hit", "decay"):
            delta[item] = delta.get(item, 0) + (1 if kind == "hit" else -1)
        elif kind == "replace":
            alive.discard(item)
            alive.add(new)
            for _, _, d in runs:
                d.pop(new, None)
            delta[new] = 1
    return {h: sum((Fraction(d.get(h, 0)) - n * p.offset) / p.scale for p, n, d in runs) for h in alive}


def test_dsr_bookkeeping_equivalence() -> None:
    """For fixed random sequences of reports and modes (hits, decays, replacements,
    misses; ~30% mode switches), the server's heavy part, the switch-time rescale, the released
    code's per-report form and the closed phase sum give identical exact estimates."""
    params = HgLdpParams("dsr", 1.0, 50, 4)
    pf, qf = params.grr_full
    ps, qs = params.grr_shrunk
    phases = {"full": Phase("full", qf, pf - qf), "shrunk": Phase("shrunk", qs, ps - qs)}
    rnd = random.Random(42)
    for trial in range(20):
        warm = {h: rnd.randrange(1, 40) for h in range(4)}
        heavy, events = DebiasedHeavyPart(4), []
        heavy.load(warm)
        mode, fresh = "shrunk", 100
        for _ in range(300):
            if rnd.random() < 0.3:
                mode = "full" if mode == "shrunk" else "shrunk"
            heavy.report(phases[mode])
            kind = rnd.choice(["hit", "decay", "replace", "miss"])
            item = rnd.choice(heavy.items())
            new = None
            if kind == "hit":
                heavy.hit(item)
            elif kind == "decay":
                heavy.decay(item)
            elif kind == "replace":
                new, fresh = fresh, fresh + 1
                heavy.replace(item, new)
            events.append((mode, kind, item, new))
        got = heavy.estimates()
        assert got == _switch_form(events, warm, phases) == _per_report_form(events, warm, phases), trial
        assert got == _phase_sum(events, warm, phases), trial
        assert heavy.switches > 50
        for h in heavy.items():  # the count ED sees is s_cur·f̂
            assert heavy.count(h) == heavy.phase.scale * got[h]


@pytest.mark.parametrize("scheme", ["bgr", "bdr"])
def test_non_private_limit_is_heavy_guardian(scheme: str) -> None:
    """The non-private limit: with p = 1, q = 0 (the server's debiasing constants set to o = 0, s = 1; the
    client at ε = 700, whose q, q1, q2 < e^−230 never change a value here) BGR and BDR reduce
    exactly to HeavyGuardian (w = 1, λ_h = k, λ_l = 0) on the raw stream with the same decay
    randomness, and the estimates are the recorded counts."""
    d, k = 60, 5
    rnd = random.Random(9)
    weights = [1 / (i + 1) ** 1.2 for i in range(d)]
    warm = rnd.choices(range(d), weights, k=300)
    stream = rnd.choices(range(d), weights, k=3000)
    params = HgLdpParams(scheme, 700, d, k)
    server = HgLdpServer(params, rng=SeededRandomSource("limit"))
    server.warm_up(warm)
    server.start_statistics()
    for name in server._phases:
        server._phases[name] = Phase(name, Fraction(0), Fraction(1))  # p = 1, q = 0
    server.heavy.unit = None  # ED on the (p = 1) counts themselves
    _run(server, make_client(params, rng=SeededRandomSource("c")), stream)
    plain = HeavyGuardian(k, rng=SeededRandomSource("limit"))
    plain.warm_up(warm + stream)
    assert server.estimates_exact() == plain.counts


def test_dsr_and_cnr_run_with_switches_and_nominations() -> None:
    """A skewed stream: DSR (ε = 6) switches modes; CNR (ε = 0.5) fills its light part; both keep
    k heavy items and report the top-k clamped and sorted, in bounded memory."""
    d, k = 200, 5
    rnd = random.Random(1)
    weights = [1 / (i + 1) for i in range(d)]
    for scheme in ("dsr", "cnr"):
        params = HgLdpParams(scheme, 6.0 if scheme == "dsr" else 0.5, d, k)
        server = HgLdpServer(params, rng=SeededRandomSource(scheme))
        server.warm_up(rnd.choices(range(d), weights, k=500))
        server.start_statistics()
        _run(server, make_client(params, rng=SeededRandomSource("x")), rnd.choices(range(d), weights, k=4000))
        top = server.heavy_hitters()
        assert (
            len(top) == k and all(v >= 0 for _, v in top) and top == sorted(top, key=lambda t: (-t[1], t[0]))
        )
        if scheme == "dsr":
            assert server.heavy.switches > 3
        else:
            assert len(server.light.cells) == params.light_cells
        assert server.size_bytes() < 1000


def test_cnr_swap_on_eviction() -> None:
    """Algorithm 11: cold reports fill the light part while the weakest heavy cell decays; when it
    reaches 0 the light part's largest item takes its cell and the evicted item its light cell."""
    params = HgLdpParams("cnr", 1.0, 20, 2, light_cells=2)
    server = HgLdpServer(params, gamma_h=Fraction(1, 2), rng=SeededRandomSource(4))
    server.warm_start({0: 1, 1: 50})
    server.start_statistics()
    steps = 0
    while 7 not in server.heavy:
        server.insert_output(7, server.public_state())
        steps += 1
        assert steps < 1000
        if 7 not in server.heavy:
            assert 0 in server.heavy and server.light.cells.get(7, 0) >= 1
    assert (
        set(server.heavy.items()) == {1, 7} and server.light.cells.get(0) == 1 and 7 not in server.light.cells
    )


def test_state_versions_and_refusals() -> None:
    history = StateHistory(max_lag=2)
    states = [history.publish((1, 2), flag) for flag in (True, False, True, False)]
    assert [s.version for s in states] == [0, 1, 2, 3] and history.publish((1, 2), False) is states[-1]
    assert history.get(2) == states[2]
    for version, reason in ((0, "too-old"), (9, "unknown"), (-1, "unknown")):
        with pytest.raises(StaleStateError, match="state_version") as info:
            history.get(version)
        assert info.value.reason == reason
    params = HgLdpParams("dsr", 1.0, 20, 2)
    server = HgLdpServer(params, max_lag=0, rng=SeededRandomSource(1))
    server.warm_start({0: 5, 1: 5})
    client = make_client(params, rng=SeededRandomSource(2))
    bad = LdpReport("hg-dsr", client._canonical, b"\x03", state_version=0)
    with pytest.raises(RuntimeError, match="statistics"):
        server.add(bad)
    v0 = server.start_statistics()
    assert v0.version == 0
    with pytest.raises(StateDigestError, match="no state digest"):
        server.add(bad)  # a report must name the state's digest too
    bad = dataclasses.replace(bad, state_digest=v0.digest)
    with pytest.raises(InconsistentReportError, match="shrunk"):
        server.add(bad)  # cold item 3 cannot be a shrunk-mode output
    with pytest.raises(StaleStateError) as info:
        server.add(LdpReport("hg-dsr", bad.parameters, b"\x00", state_version=5))
    assert info.value.reason == "unknown"
    with pytest.raises(ValueError, match="report"):
        server.add(make_client(HgLdpParams("bgr", 1.0, 20, 2)).encode(1))
    with pytest.raises(ValueError, match="gamma_h"):
        HgLdpServer(HgLdpParams("bdr", 1.0, 20, 2), gamma_h=Fraction(3, 2))
    bdr = HgLdpServer(HgLdpParams("bdr", 1.0, 20, 2))
    bdr.warm_start({0: 5, 1: 5})
    with pytest.raises(ValueError, match="gamma_h"):
        bdr.start_statistics()
    empty = HgLdpServer(HgLdpParams("bgr", 1.0, 20, 2))
    with pytest.raises(RuntimeError, match="full"):
        empty.start_statistics()


def test_dsr_flag_and_decay_use_the_codes_unit_in_both_modes() -> None:
    """The τ = 1 flag and b^−C see DSR counts in units of p_s − q_s in both modes (the released
    code's unit, docs/ldp.md choice 4). d = 1000, k = 20, ε = 1: warm-up counts of 100
    (≈ 7.6 such units) and one of 1 put version 0 in full mode; one full-mode hit on the weak item
    lifts it to ≈ 44 units, so the flag drops and DSR returns to shrunk mode. (In full mode's own
    unit p − q, ≈ 44× smaller, every warm count is ≈ 0.17 ≤ 1 and full mode never ended.)"""
    params = HgLdpParams("dsr", 1, 1000, 20)
    server = HgLdpServer(params, rng=SeededRandomSource("unit"))
    server.warm_start({**dict.fromkeys(range(1, 20), 100), 0: 1})
    state = server.start_statistics()
    assert state.dsr_mode == "full"
    server.insert_output(0, state)
    assert server.public_state().dsr_mode == "shrunk"
    ps, qs = params.grr_shrunk
    weak, count = server.heavy.ed_weakest()
    assert count == server.estimates_exact()[weak] * (ps - qs) and count > 1
    # A decay lowers the ED count by 1 (one p_s − q_s unit), also in full mode.
    assert server.heavy.phase.name == "full"
    before = server.heavy.ed_weakest()
    server.heavy.ed_decay(before[0])
    assert server.heavy.ed_weakest()[1] == before[1] - 1


def test_bgr_reports_follow_the_version_rule() -> None:
    """BGR's randomiser ignores the state, but its reports name a version like every scheme's: an
    unknown version or one older than max_lag is refused with the reason, never mixed in."""
    params = HgLdpParams("bgr", 1.0, 50, 4)
    server = HgLdpServer(params, max_lag=1, rng=SeededRandomSource("v"))
    server.warm_start({0: 9, 1: 9, 2: 9, 3: 1})
    v0 = server.start_statistics()
    client = make_client(params, rng=SeededRandomSource("c"))
    client.update_state(v0)
    report = client.encode(7)
    unknown = LdpReport(report.scheme, report.parameters, report.payload, state_version=5)
    with pytest.raises(StaleStateError) as caught:
        server.add(unknown)
    assert caught.value.reason == "unknown" and server.n == 0
    server.add(report)
    for hot in ((0, 1, 2, 10), (0, 1, 2, 11)):  # two more versions: v0 falls out (max_lag = 1)
        server.history.publish(hot, True)
    with pytest.raises(StaleStateError) as caught:
        server.add(report)
    assert caught.value.reason == "too-old" and server.n == 1


@pytest.mark.parametrize("scheme", ["dsr", "bdr"])
def test_unbiased_in_dsr_full_mode_and_bdr_m3_with_switches(scheme: str) -> None:
    """The frozen-heavy-set check (10^6 counts) with the state *flag on* for parts of the stream,
    which the test above never reaches: DSR alternates full (GRR on D) and shrunk segments (four
    phases, the phase-sum estimator across switches), BDR alternates M3 and ⊥ on the cold branch.
    The reports are randomised against, and inserted with, the segment's state. Each f̂_h − 10^6
    is within 4.5 sd of f_h (sd: the sum of each segment's exact Bernoulli variances). 4 items ×
    2 schemes at 6.8e-6 each: false-failure rate ≤ 5.5e-5 (normal approximation); seeded."""
    k, n, truth = K_FROZEN, N_FROZEN, TRUTH
    params, server, stream, _ = _frozen(scheme, 11)
    client = make_client(params, rng=SeededRandomSource(f"cl-full-{scheme}"))
    hot = tuple(truth)
    segments = [PublicState(1 + i % 2, hot, i % 2 == 0) for i in range(4)]  # flag on, off, on, off
    size = n // len(segments)
    var = dict.fromkeys(truth, Fraction(0))
    for i, state in enumerate(segments):
        part = stream[i * size : (i + 1) * size]
        for v in part:
            server.insert_output(client.randomise(v, state), state)
        for h in truth:
            f = part.count(h)
            if scheme == "dsr":
                p, q = params.grr_full if state.dsr_mode == "full" else params.grr_shrunk
                var[h] += (f * p * (1 - p) + (size - f) * q * (1 - q)) / (p - q) ** 2
            else:
                p1, q1 = params.m1
                p2, q2 = params.m2
                a, b, c = p1 * p2, p1 * q2, q1 / k
                hot_reports = sum(part.count(x) for x in truth)
                var[h] += (
                    f * a * (1 - a) + (hot_reports - f) * b * (1 - b) + (size - hot_reports) * c * (1 - c)
                ) / (p1 * (p2 - q2)) ** 2
    if scheme == "dsr":
        assert server.heavy.switches == 4  # shrunk (after the warm-up) → full → shrunk → full → shrunk
    assert server.n == n and set(server.heavy.items()) == set(truth)
    estimates = server.estimates_exact()
    for h, f in truth.items():
        error = float(estimates[h]) - FROZEN - f
        assert abs(error) <= 4.5 * math.sqrt(float(var[h])), (scheme, h, error, math.sqrt(float(var[h])))


class _AlwaysDecays:
    """A RandomSource whose draws are all 0: every Bernoulli(b^−C) decay succeeds."""

    def randbelow(self, n: int) -> int:
        return 0

    def randbits(self, n: int) -> int:
        return 0


def test_a_full_mode_dsr_decay_through_insert_output_removes_one_ed_unit() -> None:
    """Through :meth:`HgLdpServer.insert_output` (not the heavy part directly): in DSR full mode the
    decay of a miss lowers the weakest cell by exactly 1 in ED's unit p_s − q_s (``ed_decay``), not
    by 1 in the full phase's own scale p − q (≈ 44 ED units at d = 1000, k = 20, ε = 1, which would
    evict a cell of ≈ 7.6 units at once). Catches ``decay(weak, 1)`` in ``_decay_weakest``."""
    params = HgLdpParams("dsr", 1, 1000, 20)
    server = HgLdpServer(params, rng=SeededRandomSource("unit"))
    server.warm_start({**dict.fromkeys(range(1, 20), 100), 0: 1})
    full = server.start_statistics()
    assert full.dsr_mode == "full"
    server.insert_output(0, full)  # the weak item's hit: the weakest is now a warm item (≈ 7.6 units)
    server.use_rng(_AlwaysDecays())
    weak, before = server.heavy.ed_weakest()
    assert server.heavy.phase.name == "full" and 5 < before < 10
    offset = server.heavy.phase.offset * server.heavy.ed_ratio()  # the report's own offset, ED units
    server.insert_output(999, full)  # a miss (999 is cold): the weakest decays (forced) by one unit
    assert weak in server.heavy and 999 not in server.heavy
    assert server.heavy.count(weak) * server.heavy.ed_ratio() == before - offset - 1


def test_a_report_must_name_a_state_of_this_run_by_version_and_digest() -> None:
    """Version numbers restart in a fresh server run and an aborted attempt's version may have had
    other contents: the digest binds the run id, the version and the contents, and the server
    refuses a (version, digest) it did not publish in this run ("state digest mismatch")."""
    a, b = StateHistory(run_id=b"run-a"), StateHistory(run_id=b"run-b")
    va, vb = a.publish((1, 2), False), b.publish((1, 2), False)
    assert va.version == vb.version == 0 and va.digest != vb.digest and len(va.digest) == 16
    replay = StateHistory(run_id=b"run-a")  # the same run, another interleaving after a restore
    replay.publish((1, 2), False)
    assert replay.publish((1, 3), True).digest != a.publish((1, 4), True).digest  # both version 1
    assert replay.get(0, va.digest) == va and replay.get(1).version == 1
    params = HgLdpParams("dsr", 2.0, 20, 2)
    servers = []
    for run in (b"old run", b"new run"):
        server = HgLdpServer(params, rng=SeededRandomSource(1), run_id=run)
        server.warm_start({0: 5, 1: 5})
        server.start_statistics()
        servers.append(server)
    old, new = servers
    assert old.public_state().version == new.public_state().version == 0
    client = make_client(params, rng=SeededRandomSource(2))
    client.update_state(old.public_state())
    report = client.encode(0)
    old.add(report)
    with pytest.raises(StateDigestError) as caught:
        new.add(report)  # same version number, same contents, another run: refused
    assert refusal_reason(caught.value).startswith("state digest mismatch: state_version 0")
    assert new.n == 0 and old.n == 1
