"""Every keyed-noise path draws independent noise for distinct contexts and identical noise on a
replay of the same context.

Keyed noise is a DRBG, SHAKE-256(key || context || counter) (:class:`KeyedRandomSource`). Its
guarantee rests entirely on the context: two releases whose contexts coincide get the *same* noise,
and the difference of two such releases is noiseless (a total break of the guarantee when the data
differ, and identical releases revealing identical data when they do not). The paths:

* the heavy-hitters job's epoch releases (``EpochReleaser``): PMG per shard (Lebeda–Tětek Alg. 2)
  or GSHM on the merge (Thm 8.5), context = epoch + SHA-256 of the epoch's sketch + parameters;
* PCC blocks (Chan–Li–Shi–Xu §3.3, Alg. 1 per block): context = level + index + parameters +
  SHA-256 of the block's MG core — two blocks of one level with *equal* cores must still get
  independent noise (the index separates them);
* DPSW substreams (Wang–Wang–Chen KDD 2024, Alg. 2 lines 6–9): context = substream index +
  parameters;
* the LDP server's per-report randomness (HG-LDP decays): context = deployment + report number.

Independence is checked honestly, on the noise values recorded where they are drawn (the exact
kernels' outputs, or the DRBG's outputs): over many distinct contexts with the same data, (1) the
noise vectors are pairwise distinct; (2) every pair's Pearson correlation is below 6/√n (n = the
vector length; for independent vectors r is ≈ N(0, 1/n), so one pair exceeds it with probability
≈ 2e-9 and the largest family here, < 5000 pairs, with probability < 1e-5); (3) the signs of
consecutive contexts' noise, pooled over coordinates, pass a chi-square test of independence at
level 1e-4. The keys and seeds are fixed, so the tests are deterministic; the stated rates are the
chance a correct implementation would fail for a random key.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from privstream.continual.blocks import BlockId
from privstream.continual.pcc import PCC
from privstream.noise import discrete as kernels
from privstream.noise.rng import KeyedRandomSource
from privstream.window import DPSWSketch
from privstream.window.params import dpsw_params

KEY = hashlib.sha256(b"privstream test keyed-noise independence").digest()
OTHER_KEY = hashlib.sha256(b"privstream test keyed-noise independence, another run").digest()
_LAPLACE, _GAUSSIAN = kernels._discrete_laplace, kernels._discrete_gaussian
CHI2_LEVEL = 1e-4


def assert_independent(vectors: list[np.ndarray], what: str) -> None:
    """(1) pairwise distinct, (2) max pairwise |Pearson r| < 6/√n, (3) chi-square test of the
    signs of consecutive vectors, pooled over coordinates (module docstring for the error rates)."""
    assert len(vectors) >= 8, what
    n = {v.size for v in vectors}
    assert len(n) == 1, what
    size = n.pop()
    as_bytes = [v.astype(np.int64).tobytes() for v in vectors]
    assert len(set(as_bytes)) == len(vectors), f"{what}: two contexts drew identical noise"
    data = np.array(vectors, dtype=float)
    assert (data.std(axis=1) > 0).all(), what
    corr = np.corrcoef(data)
    worst = max(abs(corr[i, j]) for i, j in combinations(range(len(vectors)), 2))
    assert worst < 6 / np.sqrt(size), f"{what}: correlation {worst:.3f} between two contexts' noise"
    signs = np.sign(data).astype(int) + 1  # 0, 1, 2
    table = np.zeros((3, 3))
    np.add.at(table, (signs[:-1].ravel(), signs[1:].ravel()), 1)
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    p_value = chi2_contingency(table)[1]
    assert p_value > CHI2_LEVEL, f"{what}: signs of consecutive contexts dependent (p = {p_value:.2e})"


def test_the_independence_check_detects_shared_and_correlated_noise() -> None:
    """The check itself: it passes independent DRBG streams and fails a repeated or a partly shared
    noise vector (what a context collision or a shared noise term would give)."""
    streams = [KeyedRandomSource(KEY, f"check {i}") for i in range(30)]
    independent = [np.array([s.randbelow(201) - 100 for _ in range(400)]) for s in streams]
    assert_independent(independent, "independent streams")
    with pytest.raises(AssertionError, match="identical"):
        assert_independent([*independent, independent[3]], "a repeated context")
    shared = [v + independent[0] for v in independent[1:]]  # a common term in every vector
    with pytest.raises(AssertionError, match="correlation|dependent"):
        assert_independent(shared, "a shared noise term")


# ---------------------------------------------------------------------------------------------------
# PCC blocks (Chan–Li–Shi–Xu §3.3): one keyed source per block
# ---------------------------------------------------------------------------------------------------


class BlockNoise:
    """The discrete Laplace values each PCC block release draws (PMG over the declared domain: one
    draw per domain element, in domain order), and the SHA-256 of the block's MG core."""

    def __init__(self) -> None:
        self.current: BlockId | None = None
        self.noise: dict[BlockId, list[int]] = {}
        self.cores: dict[BlockId, str] = {}

    def laplace(self, t: int, s: int, rng: object) -> int:
        value = _LAPLACE(t, s, rng)  # type: ignore[arg-type]
        assert self.current is not None
        self.noise[self.current].append(value)
        return value


@pytest.fixture
def block_noise(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlockNoise]:
    import privstream.mechanisms.domain_topk as domain_topk

    rec = BlockNoise()
    release = PCC._release

    def recording_release(self: PCC, block: BlockId, core: object) -> dict:
        rec.current = block
        rec.noise[block] = []
        rec.cores[block] = hashlib.sha256(core.to_bytes()).hexdigest()  # type: ignore[attr-defined]
        out = release(self, block, core)  # type: ignore[arg-type]
        rec.current = None
        return out

    monkeypatch.setattr(PCC, "_release", recording_release)
    monkeypatch.setattr(domain_topk, "_discrete_laplace", rec.laplace)
    yield rec


DOMAIN = 300


def _pcc(key: bytes = KEY) -> PCC:
    # W = 16, λ = 1/4: W_0 = 1 step, levels 0..4; every level-0 block holds one step
    return PCC(1, Fraction(1, 4), 16, domain=range(DOMAIN), noise_key=key)


def test_pcc_blocks_of_one_level_with_equal_cores_draw_independent_noise(block_noise: BlockNoise) -> None:
    """Every step carries the same item, so all blocks of one level have byte-identical MG cores;
    their noise must still be independent (Lemma 3 composes *independent* block releases), and the
    releases must differ. Kills "PCC blocks of one level draw the same keyed noise when their MG
    cores are equal" (e.g. a context without the block index)."""
    pcc = _pcc()
    released = {}
    for _ in range(64):
        for block in pcc.step(7):
            released[block] = pcc.block_values(block)
    by_level: dict[int, list[BlockId]] = {}
    for block in block_noise.noise:
        by_level.setdefault(block.level, []).append(block)
    assert sorted(by_level) == [0, 1, 2, 3, 4] and len(by_level[0]) == 64
    for level, blocks in by_level.items():
        assert len({block_noise.cores[b] for b in blocks}) == 1  # equal cores within a level
        assert all(len(block_noise.noise[b]) == DOMAIN for b in blocks)  # naive path: d draws each
        if len(blocks) >= 8:
            assert_independent([np.array(block_noise.noise[b]) for b in blocks], f"PCC level {level}")
    level0 = [tuple(sorted(released[b].items())) for b in by_level[0]]
    assert len(set(level0)) == len(level0)  # equal data, independent noise: no two releases coincide
    all_noise = [tuple(v) for v in block_noise.noise.values()]
    assert len(set(all_noise)) == len(all_noise)  # across levels too


def test_pcc_replay_redraws_identical_block_noise_and_another_key_does_not(block_noise: BlockNoise) -> None:
    """A PCC restored from its state (same key) replaying the same steps redraws every later block's
    noise identically (so an aborted output equals its committed replay); another key, or other
    data in the block, draws independent noise."""
    items = [int(x) for x in np.arange(40) * 37 % 23]
    first = _pcc()
    for x in items[:13]:
        first.step(x)
    state = first.to_bytes()
    for x in items[13:]:
        first.step(x)
    original = {b: list(v) for b, v in block_noise.noise.items() if b.index * 2**b.level > 13}
    assert original
    block_noise.noise.clear()
    replay = PCC.from_bytes(state, range(DOMAIN))
    for x in items[13:]:
        replay.step(x)
    assert {b: block_noise.noise[b] for b in original} == original
    assert replay.estimates() == first.estimates()

    block_noise.noise.clear()
    other = _pcc(OTHER_KEY)
    for x in items:
        other.step(x)
    assert all(block_noise.noise[b] != original[b] for b in original)
    block_noise.noise.clear()
    changed = _pcc()
    for x in items[:-1] + [items[-1] + 1]:  # the last step's item differs: its blocks' cores differ
        changed.step(x)
    last = [b for b in original if b.index * 2**b.level == len(items)]
    assert last and all(block_noise.noise[b] != original[b] for b in last)
    unchanged = [b for b in original if b.index * 2**b.level < len(items)]
    assert all(block_noise.noise[b] == original[b] for b in unchanged)  # same block, same core


# ---------------------------------------------------------------------------------------------------
# DPSW substreams (Wang–Wang–Chen, Alg. 2 lines 6–9): one keyed source per substream
# ---------------------------------------------------------------------------------------------------


def _dpsw(key: bytes = KEY) -> DPSWSketch:
    params = dpsw_params(
        window=200, substream=50, depth=3, width=64, checkpoints=(50, 8, 1), budget_ratio=0.5,
        epsilon=1.0, delta=1e-6,
    )  # fmt: skip
    return DPSWSketch(params, domain=range(60), noise_key=key)


def test_dpsw_substreams_draw_independent_noise_and_replays_are_identical() -> None:
    """Each substream's PCMS noise (the tables Alg. 2 draws when the substream is created) comes
    from its own context: distinct substreams independent, the same substream under the same key
    identical, under another key independent. The tables ``_create`` installs are these."""
    sketch = _dpsw()
    noise = [sketch._noise_tables(sketch._sampler(i)) for i in range(24)]
    assert noise[0].shape[0] == 2 * len(sketch.params.checkpoints) - 1
    assert_independent([t.ravel() for t in noise], "DPSW substreams")
    again = _dpsw()
    assert all(np.array_equal(again._noise_tables(again._sampler(i)), noise[i]) for i in (0, 5, 23))
    other = _dpsw(OTHER_KEY)
    assert_independent(
        [other._noise_tables(other._sampler(i)).ravel() for i in range(4)] + [n.ravel() for n in noise[:8]],
        "DPSW keys",
    )
    created = _dpsw()
    created._create(3)  # the production path: a new substream's tables are its keyed noise
    assert np.array_equal(created._substreams[3].tables, noise[3])
    fed = _dpsw()
    fed.update_batch(np.zeros(120, dtype=np.int64))  # substreams 0, 1, 2 created by the data path
    assert {0, 1, 2} <= set(fed._substreams)
    # the incomplete substream's tables minus its keyed noise are exact counts (non-negative integers)
    building = fed._substreams[2]
    assert not building.complete and (building.tables - noise[2] >= 0).all()


# ---------------------------------------------------------------------------------------------------
# The heavy-hitters job: one keyed source per epoch release
# ---------------------------------------------------------------------------------------------------


class DrawLog:
    """Values the exact kernels return during a release (Laplace and Gaussian), in draw order."""

    def __init__(self) -> None:
        self.values: list[int] = []

    def laplace(self, t: int, s: int, rng: object) -> int:
        self.values.append(_LAPLACE(t, s, rng))  # type: ignore[arg-type]
        return self.values[-1]

    def gaussian(self, num: int, den: int, rng: object) -> int:
        self.values.append(_GAUSSIAN(num, den, rng))  # type: ignore[arg-type]
        return self.values[-1]


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[DrawLog]:
    import privstream.mechanisms.common as common
    import privstream.mechanisms.pmg as pmg

    log = DrawLog()
    for module in (common, pmg):
        monkeypatch.setattr(module, "_discrete_laplace", log.laplace)
    monkeypatch.setattr(common, "_discrete_gaussian", log.gaussian)
    yield log


@pytest.mark.parametrize("mode", ["per-shard", "merged"])
def test_epochs_with_identical_sketches_draw_independent_noise(draws: DrawLog, mode: str) -> None:
    """The same shard sketches in every epoch (e.g. a periodic stream): each epoch's release must
    draw independent noise (PMG per shard: η + one Z per slot; merged: GSHM, one Gaussian per
    non-zero count), and a restored releaser (same key) replaying an epoch redraws it identically."""
    from privstream.operators.epochs import TimeEpochs
    from privstream.operators.release_logic import EpochReleaser, ReleaseConfig
    from privstream.operators.shard_logic import EpochReleaseInput
    from privstream.operators.sketch_spec import SketchSpec

    k = 48
    spec = SketchSpec("mg", k, release_mode=mode)
    shards = []
    for seed in (1, 2):
        mg = spec.new()
        mg.update_batch(np.repeat(np.arange(k), 40 * seed))  # every slot non-zero, merge too
        shards.append(mg.to_bytes())
    data = spec.combine(dict(enumerate(shards)), 2)
    config = ReleaseConfig(1.0, 1e-6, 100.0, 1e-4, "hh/keyed-independence")
    releaser = EpochReleaser(config, spec, TimeEpochs(1000), noise_key=KEY)
    per_epoch = []
    for epoch in range(24):
        draws.values.clear()
        message, _ = releaser.release(EpochReleaseInput(epoch, data, 2))
        assert message is not None
        per_epoch.append(np.array(draws.values))
    expected = 2 * (k + 1) if mode == "per-shard" else k  # η + k slots per shard; k merged counts
    assert all(v.size == expected for v in per_epoch)
    assert_independent(per_epoch, f"epochs ({mode})")
    restored = EpochReleaser(config, spec, TimeEpochs(1000), noise_key=KEY)  # same checkpointed key
    for epoch in (0, 17):
        draws.values.clear()
        restored.release(EpochReleaseInput(epoch, data, 2))
        assert np.array_equal(np.array(draws.values), per_epoch[epoch])


# ---------------------------------------------------------------------------------------------------
# The LDP server: one keyed source per applied report
# ---------------------------------------------------------------------------------------------------


def test_ldp_reports_get_distinct_keyed_contexts_and_replays_are_identical(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each applied report n draws the server's randomness from KeyedRandomSource(key, "<deployment>:n"):
    distinct reports distinct contexts and independent streams, a restore replaying the same
    reports the same contexts and the same draws."""
    import privstream.operators.ldp_logic as ldp_logic
    from privstream.connectors.avro_codec import decode, encode
    from privstream.connectors.ldp_producer import report_to_record
    from privstream.connectors.ldp_state import state_from_record
    from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings

    from privstream.ldp import make_client
    from privstream.noise.rng import SeededRandomSource

    log: list[tuple[str, list[int]]] = []

    class RecordingKeyed(KeyedRandomSource):
        def __init__(self, key: bytes, context: str) -> None:
            super().__init__(key, context)
            self.out: list[int] = []
            log.append((context, self.out))

        def randbits(self, n: int) -> int:
            value = super().randbits(n)
            self.out.append(value)
            return value

    monkeypatch.setattr(ldp_logic, "KeyedRandomSource", RecordingKeyed)
    rnd = random.Random(0)
    warm = tuple(rnd.choices(range(100), [1 / (i + 1) ** 1.5 for i in range(100)], k=200))
    settings = LdpServerSettings(
        scheme="cnr", epsilon=2.0, domain_size=100, k=5, deployment="d", warm_up=warm,
        epoch_reports=1000, state_every=1000, noise_key=KEY,
    )  # fmt: skip
    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource(1))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    values = []
    for offset in range(150):
        value = encode("LdpReport", report_to_record(client.encode(rnd.choices(range(100))[0])))
        values.append(value)
        if offset == 60:
            state = logic.to_bytes()
            log_at_restore = len(log)
        for kind, data in logic.process(value, 0, offset, "reports"):
            if kind == "state":
                client.update_state(state_from_record(decode(data)[1]))
    contexts = [c for c, _ in log]
    assert len(contexts) == 150 and len(set(contexts)) == 150  # one distinct context per report
    numbers = [int(c.removeprefix("d:")) for c in contexts]  # "<deployment>:<report number>"
    assert numbers == list(range(numbers[0], numbers[0] + 150))
    assert sum(1 for _, out in log if out) >= 50  # reports do draw from their source
    # distinct contexts: independent DRBG streams (equal 128-bit prefixes: probability 2^-128 each)
    prefixes = {KeyedRandomSource(KEY, c).randbits(128) for c in contexts}
    assert len(prefixes) == len(contexts)
    original = log[log_at_restore:]
    log.clear()
    replay = LdpServerLogic(settings, state)
    for offset in range(60, 150):
        replay.process(values[offset], 0, offset, "reports")
    assert [(c, list(o)) for c, o in log] == [(c, list(o)) for c, o in original]
