"""docs/operators.md's examples run as written, as a user's own scripts (real Flink MiniCluster in a
subprocess; the Kafka example against the embedded broker), and the public operator's graph-build
checks name the argument (issue 24)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.flink_fixtures import clean_env

DOC = Path(__file__).resolve().parents[1] / "docs" / "operators.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


#: the one child process's driver: each script as ``__main__`` in turn (one JVM and gateway for all,
#: each ``env.execute`` a job of its own), its output after a marker line
DRIVER = """
import runpy, sys
for path in sys.argv[1:]:
    print(f"=== {path}", flush=True)
    runpy.run_path(path, run_name="__main__")
    sys.stdout.flush()
"""


def run_scripts(scripts: dict[str, str], tmp_path: Path, **env: str) -> dict[str, str]:
    """Run each script (name -> code) as a user's own script, all in one child Python (the venv's
    bin on PATH, as for a user who activated it); returns each script's stdout. The Flink print
    sink writes from the gateway's JVM to the same stdout, line by line, before ``execute``
    returns, so a script's lines come after its marker and before the next one."""
    paths = {}
    for name, code in scripts.items():
        paths[name] = tmp_path / f"{name}.py"
        paths[name].write_text(code)
    (tmp_path / "driver.py").write_text(DRIVER)
    start = clean_env()  # os.environ as at session start: an in-process Flink job changes it
    environ = clean_env(PATH=f"{Path(sys.executable).parent}:{start.get('PATH', '')}", **env)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), *map(str, paths.values())],
        capture_output=True, text=True, env=environ, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sections = re.split(r"^=== (.*)\n", done.stdout, flags=re.M)[1:]
    by_path = dict(zip(sections[::2], sections[1::2], strict=True))
    return {name: by_path[str(path)] for name, path in paths.items()}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, kafka_broker: Any) -> dict[str, str]:
    """Every runnable example's stdout: the page's blocks 1, 2, 4, 5 and 6, the Kafka block 3 over a topic
    of 3,000 clicks on the embedded broker, :data:`EVENT_TIME_SCRIPT` and
    :data:`PUNCTUATED_AT_PARALLELISM_2` (one child, one JVM)."""
    from privstream.connectors.clients import kafka_producer

    from tests.flink_fixtures import create_topic, fresh_name

    topic = create_topic(kafka_broker.bootstrap, fresh_name("clicks"))
    producer = kafka_producer(kafka_broker.bootstrap)
    for i in range(3000):
        producer.send(topic, value=("home" if i % 2 else f"page-{i % 50}").encode())
    producer.flush()
    producer.close()
    scripts = {
        "collection": BLOCKS[1],
        "schedule": BLOCKS[2],
        "kafka": BLOCKS[3],
        "sliding_window": BLOCKS[4],
        "event_time": EVENT_TIME_SCRIPT.replace("ITEMS", repr(EVENT_TIME_ITEMS)),
        "punctuated": PUNCTUATED_AT_PARALLELISM_2,
        "ldp": BLOCKS[5],
        "sql": BLOCKS[6],
        "continual": BLOCKS[7],
    }
    return run_scripts(
        scripts, tmp_path_factory.mktemp("docs-operators"),
        PRIVSTREAM_BOOTSTRAP=kafka_broker.bootstrap, CLICKS_TOPIC=topic,
    )  # fmt: skip


def released(stdout: str) -> dict[int, str]:
    """epoch -> the printed release (PyFlink's print prefixes ``<subtask>> `` at parallelism > 1)."""
    lines = [re.sub(r"^\d+> ", "", line) for line in stdout.splitlines()]
    return {int(m.group(1)): line for line in lines if (m := re.match(r"epoch (\d+): ", line))}


def test_the_page_has_the_examples_the_tests_run() -> None:
    assert (
        len(BLOCKS) == 8
        and "private_continual_heavy_hitters" in BLOCKS[7]
        and "from_collection" in BLOCKS[1]
        and "KafkaSource" in BLOCKS[3]
    )
    assert "private_sliding_window" in BLOCKS[4] and "from_collection" in BLOCKS[4]
    assert "private_ldp_heavy_hitters" in BLOCKS[5] and "private_top_items" in BLOCKS[6]


@pytest.mark.flink
@pytest.mark.kafka
def test_collection_example_releases_the_heavy_items(outputs: dict[str, str]) -> None:
    out = released(outputs["collection"])
    assert sorted(out) == [0, 1]  # 10,000 items over 2 shards, 5,000-element count epochs
    first = out[0]
    for item in ("(1, ", "(2, ", "(3, "):  # the three heavy items, found in epoch 0 (3000/2000/1000)
        assert item in first, first
    assert "pmg, ε=1.0" in first


@pytest.mark.flink
@pytest.mark.kafka
def test_schedule_example_releases_every_epoch_of_the_span(outputs: dict[str, str]) -> None:
    out = released(outputs["schedule"])
    assert sorted(out) == [0, 1, 2, 3, 4]  # epochs 0, 3 and 4 hold no element: released all the same
    assert "(1, " in out[1] or "(1, " in out[2]


@pytest.mark.flink
@pytest.mark.kafka
def test_sliding_window_example_releases_every_substream_end_with_the_heavy_items(
    outputs: dict[str, str],
) -> None:
    """Block 4 (count windows, w = 2000, W = 500, 2 shards): a release at every substream end of each
    shard's own stream, each reading the last w items; items 1, 2 and 3 found in their shard."""
    from privstream.partitioning import partition_for

    clicks = eval(re.search(r"^clicks = (.*)$", BLOCKS[4], flags=re.M).group(1))  # the page's own list
    lines = [re.sub(r"^\d+> ", "", line) for line in outputs["sliding_window"].splitlines()]
    found = [re.fullmatch(r"shard (\d), items (\d+)\.\.(\d+): (.*)", line) for line in lines]
    out = [(int(m[1]), int(m[2]), int(m[3]), m[4]) for m in found if m]
    shard_of = dict(zip((1, 2, 3), partition_for([1, 2, 3], 2).tolist(), strict=True))
    counts = np.bincount(partition_for(clicks, 2), minlength=2)
    for shard in (0, 1):
        mine = [(start, end, heavy) for s, start, end, heavy in out if s == shard]
        assert [end for _, end, _ in mine] == list(range(500, counts[shard] // 500 * 500 + 1, 500))
        assert all(start == max(1, end - 2000 + 1) for start, end, _ in mine)
        full = [heavy for start, end, heavy in mine if end >= 2000]  # windows of w items
        for item in (1, 2):  # 25% and 17% of the stream, ~40% of their shard: in every full window
            assert shard_of[item] != shard or all(f"({item}, " in heavy for heavy in full), (item, full)
        if shard == shard_of[3]:  # 8% of the stream, ~14% of its shard (threshold ~9.5%)
            assert any("(3, " in heavy for heavy in full), full


EVENT_TIME_SCRIPT = """
from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment

from privstream.flink import InMemoryLedger, Punctuation, private_sliding_window

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
elements = []
for tick in range(100, 801, 100):  # a punctuation at every substream end (W = 100 ms)
    elements += [(item, None, tick - 100 + i) for i in range(60) for item in ITEMS if tick <= 600]
    elements.append((-1, None, tick))  # -1: a punctuation
at = elements.index((-1, None, 100)) + 1  # after the first punctuation (clock 99):
elements[at:at] = [(ITEMS[0], None, 5), (ITEMS[0], None, 10_000)]  # late, and beyond the horizon
# Punctuation objects made in Python (from_collection's Java side cannot unpickle them), in one
# sub-task with the elements: one clock, in order; the operator's own sub-tasks run at 2
raw = env.from_collection(elements, type_info=Types.ROW([Types.LONG(), Types.LONG(), Types.LONG()]))
stream = raw.map(
    lambda e: Punctuation(e[2]) if e[0] == -1 else tuple(e), output_type=Types.PICKLED_BYTE_ARRAY()
).set_parallelism(1)
out = private_sliding_window(
    stream,
    windowing="event-time", window=400, substream=100, window_items=200, epsilon=1.0, delta=1e-6,
    domain_size=64, gamma=0.2, width=64, shards=3, ledger=InMemoryLedger(1.0, 1e-6),
)
out.releases.map(lambda r: f"release {r['shard']} {r['window_end']} {sorted(h['item'] for h in r['heavy_hitters'])}").print()
out.rejected.map(lambda r: f"rejected {r.element} {r.shard}: {r.reason}").print()
env.execute("event-time windows")
"""


def _event_time_items() -> list[int]:
    """One item of shard 0 and one of shard 1 (of 3 shards); none hashed to shard 2."""
    from privstream.partitioning import partition_for

    shard_of = dict(zip(range(64), partition_for(list(range(64)), 3).tolist(), strict=True))
    return [next(i for i in range(64) if shard_of[i] == s) for s in (0, 1)]


EVENT_TIME_ITEMS = _event_time_items()


@pytest.mark.flink
@pytest.mark.kafka
def test_event_time_windows_release_every_shard_at_every_punctuation(outputs: dict[str, str]) -> None:
    """Event time in a real Flink run: every shard — also the one with no element — releases once at
    each punctuation (eight substream ends), the heavy items are found in their shard, and the late
    and far-future elements come back rejected with the reason."""
    items = EVENT_TIME_ITEMS
    lines = [re.sub(r"^\d+> ", "", line) for line in outputs["event_time"].splitlines()]
    releases = sorted(tuple(line.split(" ", 3)[1:]) for line in lines if line.startswith("release "))
    ends = [str(100 * k - 1) for k in range(1, 9)]
    assert [(s, e) for s, e, _ in releases] == sorted((str(s), e) for s in range(3) for e in ends)
    for shard, end, heavy in releases:
        if shard != "2" and 299 <= int(end) <= 599:  # windows full of the shard's one item
            assert items[int(shard)] in ast.literal_eval(heavy), (shard, end, heavy)
    rejected = [line for line in lines if line.startswith("rejected ")]
    assert len(rejected) == 2, lines
    assert any("late" in line for line in rejected) and any("beyond the horizon" in line for line in rejected)


@pytest.mark.flink
@pytest.mark.kafka
def test_kafka_source_example(outputs: dict[str, str]) -> None:
    out = released(outputs["kafka"])
    assert out and any("('home', " in line for line in out.values()), out


@pytest.mark.flink
@pytest.mark.kafka
def test_ldp_server_example_releases_the_heavy_items_every_1000_reports(outputs: dict[str, str]) -> None:
    """Block 5: 3,000 CNR reports (ε = 2, d = 100, k = 5) → releases at epochs 1, 2 and 3, each of k
    items with item 0 (≈ 26 % of the reports) first; the server published new state versions."""
    lines = [re.sub(r"^\d+> ", "", line) for line in outputs["ldp"].splitlines()]
    releases = {
        int(m[1]): ast.literal_eval(m[2]) for line in lines if (m := re.fullmatch(r"epoch (\d+): (.*)", line))
    }
    assert sorted(releases) == [1, 2, 3], lines
    for items in releases.values():
        assert len(items) == 5 and items[0][0] == 0 and items[0][1] > 300, items
    versions = [int(line.split()[-1]) for line in lines if line.startswith("state version ")]
    assert versions and max(versions) > 0, lines


@pytest.mark.flink
@pytest.mark.kafka
def test_sql_example_shows_every_window_of_the_schedule_with_its_guarantee(outputs: dict[str, str]) -> None:
    """Block 6: windows [0, 2 s) .. [8 s, 10 s) of the schedule each appear — ``home`` (2/3 of the
    clicks, 1 s .. 7 s) released where it has clicks, an 'empty' row (item NULL) for the last window
    — every row with the SQL relation's guarantee; nothing else is released (each page-N has at most
    15 clicks a window)."""
    rows = [
        [c.strip() for c in line.split("|")[2:-1]]
        for line in outputs["sql"].splitlines()
        if line.startswith("| +I")
    ]
    by_window: dict[int, list[tuple[str, str]]] = {}
    for start, status, item, _count, guarantee in rows:
        by_window.setdefault(int(start), []).append((status, item))
        assert guarantee.startswith("(ε=1, δ=1e-06)-DP for this"), guarantee  # the print cuts it at 30
    assert sorted(by_window) == [0, 2000, 4000, 6000, 8000], rows
    assert by_window[8000] == [("empty", "<NULL>")]
    for start in (0, 2000, 4000, 6000):
        assert by_window[start] == [("released", "home")], by_window


@pytest.mark.flink
def test_sql_bad_arguments_name_the_argument(env: Any) -> None:
    from pyflink.table import StreamTableEnvironment

    from privstream.flink import InMemoryLedger, private_top_items

    t_env = StreamTableEnvironment.create(env)
    t_env.create_temporary_view(
        "rows3", t_env.from_elements([(1, 2, 3, 1.5, "x")], ["item", "u", "ts", "d", "s"])
    )
    base = dict(
        view="v",
        epsilon=1.0,
        delta=1e-6,
        k=4,
        window_ms=1000,
        schedule=(0, 5000),
        ledger=InMemoryLedger(1, 1e-6),
    )
    cases = [
        ("SELECT item, ts FROM rows3", {}, "source: expected 3 columns"),
        ("SELECT d, u, ts FROM rows3", {}, "source: expected an item column"),
        ("SELECT item, u, s FROM rows3", {}, "source: expected an event-time column"),
        ("SELECT item, u, ts FROM rows3", {"view": "not a name"}, "view: expected a view name"),
        ("SELECT item, u, ts FROM rows3", {"window_ms": 0}, "window_ms: expected an int >= 1"),
        (
            "SELECT item, u, ts FROM rows3",
            {"schedule": (500, 5000)},
            "schedule: expected .* multiples of window_ms",
        ),
        ("SELECT item, u, ts FROM rows3", {"epsilon": 1e308}, "epsilon: ε = 1e\\+308 is above 100"),
    ]
    for query, change, message in cases:
        with pytest.raises(ValueError, match=f"^{message}"):
            private_top_items(t_env, query, **{**base, **change})  # type: ignore[arg-type]


def test_sql_reads_every_event_time_type_as_utc_milliseconds() -> None:
    """BIGINT ms as is; TIMESTAMP_LTZ (an Instant) by its epoch milliseconds; TIMESTAMP (naive) as
    UTC; the user column is never passed on (the unit is one row)."""
    from datetime import datetime

    from pyflink.common import Row
    from pyflink.common.time import Instant

    from privstream.flink.sql import _event

    when = 1_700_000_123_456
    assert _event(Row("a", 7, when)) == ("a", None, when)
    assert _event(Row("a", 7, Instant.of_epoch_milli(when))) == ("a", None, when)
    naive = datetime(2023, 11, 14, 22, 15, 23, 456000)  # = when in UTC
    assert _event(Row(5, None, naive)) == (5, None, when)


@pytest.mark.flink
def test_ldp_server_bad_arguments_name_the_argument(env: Any) -> None:

    from privstream.flink import LdpServerSettings, private_ldp_heavy_hitters

    stream = env.from_collection([b"x"])  # pickled elements
    with pytest.raises(ValueError, match="^settings: expected an LdpServerSettings"):
        private_ldp_heavy_hitters(stream, {"scheme": "cnr"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^reports: expected a pyflink DataStream"):
        private_ldp_heavy_hitters([b"x"], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^--epsilon: ε = 1e\\+308 is above 100"):
        LdpServerSettings(scheme="cnr", epsilon=1e308, domain_size=9, k=2, deployment="d", warm_up=(1,))


@pytest.fixture(scope="module")
def env() -> Any:
    from pyflink.datastream import StreamExecutionEnvironment

    return StreamExecutionEnvironment.get_execution_environment()


@pytest.mark.flink
@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"epsilon": 1e308}, "epsilon"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"delta": 0.5}, "delta"),  # above the project's bound (0.1)
        ({"k": 0}, "k"),
        ({"shards": 0}, "shards"),
        ({"m": 64}, "m"),
        ({"epochs": 100}, "epochs"),
        ({"mechanism": "nope"}, "mechanism"),
        ({"release_mode": "merged", "mechanism": "pmg"}, "mechanism"),
        ({"schedule": (0, 1000)}, "punctuated/schedule"),  # count epochs take no clock
        ({"ledger": {"total_epsilon": 1}}, "ledger"),
    ],
)
def test_bad_arguments_fail_at_graph_build_naming_the_argument(
    env: Any, options: dict, argument: str
) -> None:
    from pyflink.common import Types

    from privstream.flink import CountEpochs, InMemoryLedger, private_heavy_hitters

    kwargs = {
        "epsilon": 1.0,
        "delta": 1e-6,
        "k": 16,
        "epochs": CountEpochs(10),
        "ledger": InMemoryLedger(1.0, 1e-6),
    }
    kwargs.update(options)
    with pytest.raises(ValueError) as info:
        private_heavy_hitters(env.from_collection([1, 2], type_info=Types.LONG()), **kwargs)
    assert str(info.value).startswith(f"{argument}:"), str(info.value)


@pytest.mark.flink
@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"epsilon": 1e308}, "epsilon"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": "1"}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 0.5}, "delta"),
        ({"window": 0}, "window"),
        ({"substream": 500}, "substream"),  # longer than the window
        ({"depth": 1.5}, "depth"),
        ({"width": 2}, "width"),  # zeta = e/width >= 1
        ({"gamma": 0.001}, "gamma"),  # below zeta: every item would be heavy
        ({"domain_size": 0}, "domain_size"),
        ({"shards": 0}, "shards"),
        ({"shards": True}, "shards"),
        ({"queries": (1, 99)}, "queries"),  # outside the domain
        ({"queries": 5}, "queries"),
        ({"checkpoints": (10, 20)}, "checkpoints"),
        ({"alpha": 2.0}, "alpha"),
        ({"hash_seed": -1}, "hash_seed"),
        ({"shard_key": "position"}, "shard_key"),
        ({"windowing": "tumbling"}, "windowing"),
        ({"window_items": 10}, "window_items"),  # only for event time
        ({"origin": 5}, "origin"),
        ({"windowing": "event-time"}, "window_items"),  # event time needs the public bound
        ({"name": "a b"}, "name"),
        ({"ledger": {"total_epsilon": 1}}, "ledger"),
        ({"ledger": "in-memory"}, "ledger"),
    ],
)
def test_sliding_window_bad_arguments_fail_at_graph_build_naming_the_argument(
    env: Any, options: dict, argument: str
) -> None:
    from pyflink.common import Types

    from privstream.flink import InMemoryLedger, private_sliding_window

    kwargs = {
        "window": 200,
        "substream": 50,
        "epsilon": 1.0,
        "delta": 1e-6,
        "domain_size": 64,
        "gamma": 0.1,
        "width": 64,
        "ledger": InMemoryLedger(1.0, 1e-6),
    }
    kwargs.update(options)
    with pytest.raises(ValueError) as info:
        private_sliding_window(env.from_collection([1, 2], type_info=Types.LONG()), **kwargs)
    assert str(info.value).startswith(f"{argument}:"), str(info.value)
    assert not str(info.value).startswith(f"{argument}: {argument}"), str(info.value)


@pytest.mark.flink
def test_sliding_window_charges_the_run_once_at_graph_build(env: Any) -> None:
    """The in-memory ledger refuses a run whose (ε, δ) exceeds its total, naming ``ledger``; a run
    that fits is charged once, and the graph's releases name that entry; event-time windows refuse
    a stream of plain items (no event times, no punctuations)."""
    from pyflink.common import Types

    from privstream.flink import InMemoryLedger, private_sliding_window

    base = {"window": 200, "substream": 50, "delta": 1e-6, "domain_size": 64, "gamma": 0.1, "width": 64}
    plain = env.from_collection([1, 2], type_info=Types.LONG())
    with pytest.raises(ValueError, match="^ledger: .* would spend .* > total"):
        private_sliding_window(plain, epsilon=2.0, ledger=InMemoryLedger(1.0, 1e-6), **base)
    out = private_sliding_window(plain, epsilon=1.0, ledger=InMemoryLedger(1.0, 1e-6, "mine"), **base)
    assert (out.charge.ledger_id, out.charge.sequence) == ("mine", 1) and out.charge.entry_hash
    with pytest.raises(ValueError, match="^events: "):
        private_sliding_window(
            plain,
            epsilon=1.0,
            windowing="event-time",
            window_items=100,
            ledger=InMemoryLedger(1, 1e-6),
            **base,
        )
    row = Types.ROW([Types.LONG(), Types.LONG(), Types.LONG()])
    with pytest.raises(ValueError, match="^events: event-time windows release on Punctuation elements"):
        private_sliding_window(
            env.from_collection([(1, None, 5)], type_info=row),
            epsilon=1.0,
            windowing="event-time",
            window_items=100,
            ledger=InMemoryLedger(1, 1e-6),
            **base,
        )
    with pytest.raises(ValueError, match="^events: expected a pyflink DataStream"):
        private_sliding_window([1, 2], epsilon=1.0, ledger=InMemoryLedger(1, 1e-6), **base)  # type: ignore[arg-type]


@pytest.mark.flink
@pytest.mark.kafka
def test_sliding_window_charges_a_kafka_ledger_through_the_jobs_path(
    env: Any, kafka_broker: Any, unique_topic: Any
) -> None:
    """A ``KafkaLedger`` is charged by the job's ``charge_ledger`` (read to its end, one entry
    written) before the graph exists; a second graph that would overspend it is refused, naming
    ``ledger``, and writes nothing."""
    from privstream.connectors.ledger_topic import read_ledger
    from pyflink.common import Types

    from privstream.accounting import Budget, PrivacyLedger
    from privstream.flink import KafkaLedger, private_sliding_window

    topic = unique_topic("ledger", compacted=True)
    ledger = KafkaLedger(kafka_broker.bootstrap, "sw/t", total_epsilon=1.5, total_delta=1e-5, topic=topic)
    base = {"window": 200, "substream": 50, "delta": 1e-6, "domain_size": 64, "gamma": 0.1, "width": 64}
    plain = env.from_collection([1, 2], type_info=Types.LONG())
    out = private_sliding_window(plain, epsilon=1.0, ledger=ledger, **base)
    assert out.charge.ledger_id == "sw/t" and out.charge.entry_hash
    with pytest.raises(ValueError, match="^ledger: .* would spend"):
        private_sliding_window(plain, epsilon=1.0, ledger=ledger, **base)
    expected = PrivacyLedger(Budget(1.5, 1e-5), composition="sequential", ledger_id="sw/t")
    state = PrivacyLedger.from_bytes(read_ledger(kafka_broker.bootstrap, topic, expected, job_name="t").state)
    assert (state.sequence, state.head.entry_hash) == (out.charge.sequence, out.charge.entry_hash)


class _State:
    """A keyed state of one shard for :class:`DPSWShardFunction` without Flink (value and list)."""

    def __init__(self) -> None:
        self.stored: Any = None
        self.items: list[Any] = []
        self.longest = 0  #: the longest the list has been

    def value(self) -> Any:
        return self.stored

    def update(self, value: Any) -> None:
        self.stored = value

    def get(self) -> list[Any]:
        return list(self.items)

    def add(self, value: Any) -> None:
        self.items.append(value)
        self.longest = max(self.longest, len(self.items))

    def clear(self) -> None:
        self.items = []


class _Context:
    """``RuntimeContext`` stand-in: a restore is a new function opened on the same states."""

    def __init__(self) -> None:
        self.states: dict[str, _State] = {}

    def get_state(self, descriptor: Any) -> _State:
        return self.states.setdefault(descriptor.name, _State())

    get_list_state = get_state


def _shard_run(
    windowing: str, elements: list[Any], restore_at: int | None, context: _Context, substream: int = 50
) -> list[Any]:
    """One shard's :class:`DPSWShardFunction` over ``elements`` (items, or ``(item, ms)`` and
    ``("tick", ms)``), restarted from its state (a new instance, empty memory) before ``restore_at``."""
    from privstream.operators.elements import element_payload
    from privstream.operators.payloads import WatermarkPayload
    from privstream.operators.shard_operator import TypedEvent
    from privstream.operators.window_logic import WindowSettings

    from privstream.flink.sliding_window import DPSWShardFunction

    event_time = windowing == "event-time"
    settings = WindowSettings(
        window=4 * substream, substream=substream, depth=3, width=64, epsilon=1.0, delta=1e-6,
        domain_size=64, gamma=0.1, shards=1, windowing=windowing,
        window_items=12 * substream if event_time else None, submission_key=bytes(32),
    )  # fmt: skip
    out: list[Any] = []
    function = None
    for n, element in enumerate(elements):
        if function is None or n == restore_at:
            function = DPSWShardFunction(settings, "t")
            function.open(context)  # type: ignore[arg-type]
        if isinstance(element, tuple) and element[0] == "tick":
            event = TypedEvent(0, WatermarkPayload("p", element[1]), None)
        else:
            fields = (element[0], None, element[1]) if event_time else element
            event = TypedEvent(0, element_payload(fields, user_level=False, shard_key="item", shards=1,
                                                  needs_time=event_time)[1], element)  # fmt: skip
        out += [r if isinstance(r, dict) else r[1] for r in function.process_element(event, None)]
    return [{k: v for k, v in r.items() if k != "release_time"} if isinstance(r, dict) else r for r in out]


@pytest.mark.flink
@pytest.mark.parametrize("windowing", ["count", "event-time"])
def test_sliding_window_shard_state_restores_mid_substream(windowing: str) -> None:
    """The keyed state (sketch bytes at the last release or clock move, plus the elements since)
    rebuilds the same sketch: a restart at any point gives the same releases and rejections as an
    uninterrupted run; the elements since are dropped at every release."""
    if windowing == "count":
        elements: list[Any] = [i % 7 for i in range(430)]
    else:
        elements = []
        for tick in range(50, 401, 50):
            elements += [(i % 7, tick - 50 + i % 50) for i in range(40)] + [("tick", tick)]
        elements.insert(45, (1, 3))  # late (the clock is 49 after the first punctuation)
    whole = _shard_run(windowing, elements, None, _Context())
    assert sum(isinstance(r, dict) for r in whole) == 8
    assert [r.element for r in whole if not isinstance(r, dict)] == ([] if windowing == "count" else [(1, 3)])
    for restore_at in (1, 77, 150, len(elements) - 1):
        context = _Context()
        assert _shard_run(windowing, elements, restore_at, context) == whole, restore_at
        assert len(context.states["since"].items) < 50


@pytest.mark.flink
@pytest.mark.parametrize("windowing", ["count", "event-time"])
def test_sliding_window_shard_state_stays_bounded_between_releases(windowing: str) -> None:
    """Substreams longer than FLUSH_EVERY elements (150 items; 150 events between punctuations):
    the elements since the last write never reach FLUSH_EVERY (the sketch is written, a count
    window's waiting items fed to it, every FLUSH_EVERY elements), and a restart anywhere,
    before or after such a write, gives the releases of an uninterrupted run."""
    from privstream.operators.unflushed import FLUSH_EVERY

    if windowing == "count":
        elements: list[Any] = [i % 7 for i in range(700)]
    else:
        elements = []
        for tick in range(150, 751, 150):
            elements += [(i % 7, tick - 150 + i) for i in range(150)] + [("tick", tick)]
    whole = _shard_run(windowing, elements, None, _Context(), substream=150)
    assert sum(isinstance(r, dict) for r in whole) == (4 if windowing == "count" else 5)
    for restore_at in (1, FLUSH_EVERY - 1, FLUSH_EVERY, FLUSH_EVERY + 1, 2 * FLUSH_EVERY + 3, 151, 400):
        context = _Context()
        assert _shard_run(windowing, elements, restore_at, context, substream=150) == whole, restore_at
        assert context.states["since"].longest == FLUSH_EVERY - 1


@pytest.mark.flink
def test_time_epochs_refuse_a_stream_without_event_times(env: Any) -> None:
    from pyflink.common import Types

    from privstream.flink import InMemoryLedger, TimeEpochs, private_heavy_hitters

    plain = env.from_collection([1, 2], type_info=Types.LONG())
    base = {"epsilon": 1.0, "delta": 1e-6, "k": 16, "ledger": InMemoryLedger(1.0, 1e-6)}
    with pytest.raises(ValueError, match="^events: time epochs need an event time"):
        private_heavy_hitters(plain, epochs=TimeEpochs(1000), schedule=(0, 5000), **base)
    with pytest.raises(ValueError, match="^punctuated/schedule: time epochs need exactly one public clock"):
        private_heavy_hitters(plain, epochs=TimeEpochs(1000), **base)
    with pytest.raises(ValueError, match="^events: expected a pyflink DataStream"):
        private_heavy_hitters([1, 2], epochs=TimeEpochs(1000), schedule=(0, 5000), **base)  # type: ignore[arg-type]


PUNCTUATED_AT_PARALLELISM_2 = """
from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from privstream.flink import InMemoryLedger, Punctuation, TimeEpochs, private_heavy_hitters

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
elements = [(-1, None, 0)]
for tick in range(1000, 8001, 1000):
    elements += [(i % 5, None, tick - 1000 + i) for i in range(300)] + [(-1, None, tick)]
raw = env.from_collection(elements, type_info=Types.ROW([Types.LONG(), Types.LONG(), Types.LONG()]))
stream = raw.map(
    lambda e: Punctuation(e[2]) if e[0] == -1 else tuple(e), output_type=Types.PICKLED_BYTE_ARRAY()
).set_parallelism(1)
out = private_heavy_hitters(stream, epsilon=1.0, delta=1e-6, k=8, epochs=TimeEpochs(1000), punctuated=True,
    shards=2, release_mode="merged", ledger=InMemoryLedger(10.0, 1e-5))
out.releases.map(lambda r: f"epoch {r.epoch}: {r.items}").print()
out.rejected.map(lambda r: f"rejected {r.element}: {r.reason}").print()
env.execute("punctuated")
"""


@pytest.mark.flink
@pytest.mark.kafka
def test_punctuated_epochs_keep_the_input_order_at_a_higher_parallelism(outputs: dict[str, str]) -> None:
    """One clock (input at parallelism 1) into an environment of parallelism 2: the routing keeps
    the input's sub-tasks one to one, so no element overtakes its punctuation (with a rebalance,
    1,050 of 2,400 elements were rejected as late and epoch 0 was never released)."""
    stdout = outputs["punctuated"]
    assert "rejected" not in stdout
    assert sorted(released(stdout)) == list(range(8))


def test_sql_rows_of_a_release_state_its_guarantee_and_an_empty_one_a_null_row() -> None:
    """The view's rows of a release (its items, each with the window of its epoch and the SQL
    relation's guarantee), and of an empty release (one row, item NULL): post-processing row by row."""
    from dataclasses import replace

    from privstream.accounting import Budget
    from privstream.flink.sql import _Rows
    from privstream.mechanisms import release
    from privstream.noise import SeededRandomSource
    from privstream.sketches import MisraGries

    sketch = MisraGries(8)
    sketch.update_batch(np.array([5] * 400 + [6] * 300))
    full = replace(release(sketch, Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(1)), epoch=3)
    rows = list(_Rows(2000, (0, 10_000))(full))
    assert [tuple(r[:5]) for r in rows] == [
        (6000, 8000, 3, "released", "5"),
        (6000, 8000, 3, "released", "6"),
    ]
    assert [r[5] for r in rows] == [count for _, count in full.items]
    guarantee = rows[0][9]
    assert guarantee.startswith("(ε=1, δ=1e-06)-DP for this window (pmg); unit: one row of the source query")
    assert "windows of 2000 ms on the declared schedule [0, 10000) ms" in guarantee
    (row,) = _Rows(2000, (0, 10_000))(replace(full, items=()))
    assert (row[3], row[4], row[5], row[9]) == ("empty", None, None, guarantee)


@pytest.mark.flink
@pytest.mark.kafka
def test_continual_example_releases_every_step_with_the_heaviest_item(outputs: dict[str, str]) -> None:
    """Block 7: one release per step 1..4 of the schedule, each over the last two steps' window
    (step s: [(s - 2)·1000, s·1000) ms), and the last step's release names item 0 (about 15,300 of
    the window's 40,000 events). Its estimate was 15,800 ± 1,200 (mean ± sd over 12 runs of fresh
    noise) against a bar of θ·(the window's estimated count) ≈ 8,000: a miss needs a deviation of
    over 6 sd (the example's noise is unseeded, a user's CSPRNG draw; every one of 32 runs of steps
    1..4 named item 0)."""
    lines = [re.sub(r"^\d+> ", "", line) for line in outputs["continual"].splitlines()]
    steps = {int(m.group(1)): line for line in lines if (m := re.match(r"step (\d+) ", line))}
    assert sorted(steps) == [1, 2, 3, 4], lines
    for step, line in steps.items():
        assert f"[{(step - 2) * 1000}, {step * 1000}) ms:" in line, line
    assert "[(0, " in steps[4], steps[4]


def test_continual_bad_arguments_name_the_argument(env: Any) -> None:
    from pyflink.common import Types

    from privstream.flink import InMemoryLedger, private_continual_heavy_hitters

    rows = env.from_collection([(1, 0, 5)], type_info=Types.TUPLE([Types.LONG(), Types.LONG(), Types.LONG()]))
    base: dict[str, Any] = dict(
        epsilon=1.0, lam=0.2, window=2, universe=10, theta=0.3, step_ms=1000, schedule=(0, 4000),
        ledger=InMemoryLedger(total_epsilon=1.0, total_delta=1e-6),
    )  # fmt: skip
    for change, named in [
        ({"mode": "xx"}, "mode"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"step_ms": 0}, "step_ms"),
        ({"universe": 0}, "universe"),
        ({"theta": 1.5}, "theta"),
        ({"nodes": 0}, "nodes"),
        ({"schedule": (0, 1500)}, "schedule"),
        ({"ledger": InMemoryLedger(total_epsilon=0.5, total_delta=1e-6)}, "ledger"),
        ({"name": "a b"}, "name"),
    ]:
        with pytest.raises(ValueError, match=f"^{named}: "):
            private_continual_heavy_hitters(rows, **{**base, **change})
    plain = env.from_collection([1, 2, 3], type_info=Types.LONG())
    with pytest.raises(ValueError, match="^events: time steps need an event time"):
        private_continual_heavy_hitters(plain, **base)
    with pytest.raises(ValueError, match="^events: punctuated time steps need a pickled stream"):
        private_continual_heavy_hitters(rows, **{**base, "schedule": None})
