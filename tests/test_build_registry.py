"""Builds are registered values: a new sketch module declares its own build (stable code +
BuildGuarantees) next to its class, without editing ``privstream/sketches/build.py`` or the
mechanisms, and the release layer decides applicability from the build's guarantees alone."""

from __future__ import annotations

import copy
import importlib.util
import pickle
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from privstream.accounting import Budget, PrivacyLedger
from privstream.mechanisms import MechanismNotApplicable, applicable_mechanisms, release
from privstream.noise import SeededRandomSource
from privstream.sketches import Build, BuildGuarantees, register_build
from privstream.sketches import build as build_module

BUDGET = Budget(1.0, 1e-3)

#: A toy sketch family in its own module: it registers its build where the sketch is defined.
TOY_MODULE = textwrap.dedent(
    """
    from privstream.privacy import NeighbourRelation, Scope, Unit
    from privstream.sketches import BuildGuarantees, register_build

    TOY_MERGED = register_build(
        "TOY_MERGED",
        901,
        BuildGuarantees(
            relation=NeighbourRelation(Unit.EVENT, scope=Scope.MERGED_STREAMS, references=("toy lemma",)),
            structure="counters differ by exactly 1 on at most k keys, all with the same sign",
            reference="toy lemma (same structure as Lebeda-Tetek Cor. 7.2)",
            sketch_term="N/(k+1) (toy)",
        ),
    )


    class ToySketch:
        def __init__(self, k: int) -> None:
            self._k, self._n, self._counts = k, 0, {}

        @property
        def k(self) -> int:
            return self._k

        @property
        def n(self) -> int:
            return self._n

        @property
        def build(self):
            return TOY_MERGED

        def update(self, item: int) -> None:
            self._n += 1
            self._counts[item] = self._counts.get(item, 0) + 1

        def estimate(self, item: int) -> int:
            return self._counts.get(item, 0)

        def counters(self) -> dict:
            return dict(sorted(self._counts.items()))
    """
)


@pytest.fixture
def isolated_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test are undone afterwards (``set(Build)`` stays the library's)."""
    monkeypatch.setattr(build_module, "_BY_CODE", dict(build_module._BY_CODE))
    monkeypatch.setattr(build_module, "_BY_NAME", dict(build_module._BY_NAME))


@pytest.fixture
def toy(isolated_builds: None, tmp_path: Path) -> ModuleType:
    path = tmp_path / "toy_sketch.py"
    path.write_text(TOY_MODULE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("toy_sketch", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_sketch_module_registers_its_own_build(toy: ModuleType) -> None:
    b = toy.TOY_MERGED
    assert isinstance(b, Build) and b.name == "TOY_MERGED" and b.code == 901
    assert Build.from_code(901) is b and b in set(Build) and len(Build) == 7
    assert b.guarantees.one_signed and b.guarantees.per_counter_change == 1
    assert not b.guarantees.sequential_mg and not b.guarantees.alg1_slots


def test_release_reads_the_registered_builds_guarantees(toy: ModuleType) -> None:
    sketch = toy.ToySketch(4)
    for x in [1, 1, 1, 2, 3, 1, 2] * 20:
        sketch.update(x)
    ledger = PrivacyLedger(Budget(10.0, 1e-2))
    with pytest.raises(MechanismNotApplicable, match="sequentially"):
        release(sketch, BUDGET, mechanism="pmg", ledger=ledger)
    assert ledger.sequence == 0  # refused before the charge
    out = release(sketch, BUDGET, mechanism="gshm", rng=SeededRandomSource(1), ledger=ledger)
    assert out.mechanism == "gshm" and "toy lemma" in out.neighbour_relation and ledger.sequence == 1
    reasons = applicable_mechanisms(sketch, BUDGET)
    assert reasons["pmg"] and reasons["pmg_standard"] and reasons["pure_topk"]
    assert not reasons["gshm"] and not reasons["laplace_threshold"]


def test_duplicate_names_and_codes_are_refused(isolated_builds: None) -> None:
    g = Build.MERGED.guarantees
    with pytest.raises(ValueError, match="code 3 is already registered"):
        register_build("ANOTHER", Build.MERGED.code, g)
    with pytest.raises(ValueError, match="already registered|new public identifier"):
        register_build("MERGED", 902, g)
    for bad in (0, -1, True, 2**64, "7"):
        with pytest.raises(ValueError, match="build code"):
            register_build("BAD_CODE", bad, g)  # type: ignore[arg-type]
    for name in ("not an identifier", "_private", "guarantees", "from_code"):
        with pytest.raises(ValueError, match="identifier"):
            register_build(name, 903, g)
    with pytest.raises(TypeError, match="BuildGuarantees"):
        register_build("NO_GUARANTEES", 904, "one-signed")  # type: ignore[arg-type]
    assert len(Build) == 6


def test_builds_are_immutable_registered_values() -> None:
    with pytest.raises(TypeError, match="register_build"):
        Build("FORGED", 999, Build.MERGED.guarantees)
    with pytest.raises(AttributeError):
        Build.MERGED._guarantees = Build.ALG1_SEQUENTIAL.guarantees  # type: ignore[misc]
    for b in Build:
        assert pickle.loads(pickle.dumps(b)) is b and copy.deepcopy(b) is b and copy.copy(b) is b
    assert [(b.name, b.code) for b in Build] == [
        ("ALG1_SEQUENTIAL", 1),
        ("STANDARD_SEQUENTIAL", 2),
        ("MERGED", 3),
        ("PAMG", 4),
        ("PAMG_MERGED", 5),
        ("EXACT", 6),
    ]
    assert isinstance(Build.PAMG.guarantees, BuildGuarantees)
