"""Every fenced code block of README.md and docs/**/*.md is checked (issue 28), and fast: no Flink or
Kafka start-up of its own.

* ```` ```python ```` blocks are executed, each in a fresh Python process — except docs/operators.md's
  PyFlink examples, which tests/test_docs_operators.py runs on a real MiniCluster (:data:`RUN_ELSEWHERE`;
  this test checks that it still runs each of them). A block that needs names a page defines in prose
  gets them from :data:`PRELUDES`.
* ```` ```bash ```` (``sh``, ``shell``, ``console``) blocks, and unlabelled blocks whose lines are
  commands: every ``privstream …`` / ``python -m privstream…`` command is parsed by the real argparse
  parsers (:func:`privstream.cli.build_parser`; ``--help`` passes), ``flink run … -py jobs/<job>.py …``
  by that job's parser, ``pip install '.[extras]'`` must name extras pyproject.toml declares,
  ``python path.py`` / ``pytest path`` must name files that exist, and only the plain shell commands
  of :data:`SHELL` may appear besides. Anything else fails.
* ```` ```text ```` blocks (and unlabelled blocks that are not commands) are output, diagrams or
  logs: not code.
* A block that cannot run here says why in an HTML comment on the line before it:
  ``<!-- not-run: needs a running Flink cluster -->``; the reason must not be empty.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: page -> (the test that runs its python blocks, the indexes among the page's python blocks it runs)
RUN_ELSEWHERE: dict[str, tuple[str, frozenset[int]]] = {
    "docs/operators.md": ("tests/test_docs_operators.py", frozenset(range(1, 8))),
}

#: (page, index among its python blocks) -> code run before the block: names its prose defines
PRELUDES: dict[tuple[str, int], str] = {
    # "sketch.update_batch(items)": the page's items are a stream of ints of the declared domain
    ("docs/sliding-window.md", 0): "import numpy as np\nitems = np.arange(20_000, dtype=np.int64) % 25600\n",
}

#: plain shell commands a block may use besides the checked ones (they run nothing of privstream's)
SHELL = frozenset(
    {"cd", "source", "export", "sleep", "kill", "wait", "curl", "grep", "head", "tail", "echo", "cat", "ls"}
    | {"open", "chromium", "mkdocs", "ruff", "mypy", "git"}
)

SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console"})
NOT_RUN = re.compile(r"<!--\s*not-run:(.*?)-->", re.S)
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int
    lang: str
    code: str
    not_run: str | None  # the reason given in the comment before the block, if any
    index: int  # among the page's blocks of the same language

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks() -> list[Block]:
    out: list[Block] = []
    for page in PAGES:
        text = page.read_text()
        counts: dict[str, int] = {}
        for m in FENCE.finditer(text):
            before = text[: m.start()].rstrip().rsplit("\n", 1)[-1]
            note = NOT_RUN.search(before)
            lang = m.group("lang").lower()
            indent = m.group("indent")
            code = "\n".join(line.removeprefix(indent) for line in m.group("body").splitlines())
            index = counts.get(lang, 0)
            counts[lang] = index + 1
            out.append(
                Block(
                    page=str(page.relative_to(ROOT)),
                    line=text[: m.start()].count("\n") + 1,
                    lang=lang,
                    code=code + "\n",
                    not_run=note.group(1).strip() if note else None,
                    index=index,
                )
            )
    return out


BLOCKS = _blocks()


# ---- shell commands -----------------------------------------------------------------------------


def _strip_substitutions(line: str) -> str:
    """``$( … )`` (nested parentheses and quotes included) replaced by one word: its value is data."""
    out, i = [], 0
    while i < len(line):
        if line.startswith("$(", i):
            depth, j, quote = 1, i + 2, ""
            while j < len(line) and depth:
                c = line[j]
                if quote:
                    quote = "" if c == quote else quote
                elif c in "'\"":
                    quote = c
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                j += 1
            out.append("SUBSTITUTED")
            i = j
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def commands(code: str) -> list[list[str]]:
    """The block's simple commands as argv lists: continuation lines joined, comments dropped, split
    at ``&&``, ``||``, ``;``, ``|`` and ``&``, leading ``VAR=value`` assignments removed, ``$(…)``
    one word, optional ``[--option value]`` groups kept as options."""
    text = _strip_substitutions(code.replace("\\\n", " "))
    text = re.sub(r"\[(--[^\]]*)\]", r"\1", text)  # an optional group [--state-every 100] is checked too
    out: list[list[str]] = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        argv: list[str] = []
        for token in [*lexer, ";"]:
            if token in {"&&", "||", ";", "|", "&", ";;"}:
                while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
                    argv.pop(0)
                if argv:
                    out.append(argv)
                argv = []
            else:
                argv.append(token)
    return out


def _parse(argv: list[str]) -> None:
    """``privstream`` ``argv`` through the real parsers; raises AssertionError with argparse's message."""
    from privstream.cli import build_parser

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code != 0:  # --help exits 0
                message = err.getvalue().strip().splitlines()[-1]
                raise AssertionError(f"privstream {shlex.join(argv)}: {message}") from None


def _job_of_module(module: str) -> str | None:
    from privstream.jobs.cli import JOBS

    return next((job for job, name in JOBS.items() if name == module), None)


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def check_command(argv: list[str]) -> str:
    """Check one command; returns what was checked (for the test's report). Raises AssertionError."""
    name = Path(argv[0]).name
    if name == "privstream":
        _parse(argv[1:])
        return "parsed"
    if name in {"python", "python3"}:
        if argv[1:3] == ["-m", "venv"]:
            return "shell"
        if len(argv) > 2 and argv[1] == "-m":
            module, rest = argv[2], argv[3:]
            if module in {"privstream", "privstream.cli"}:
                _parse(rest)
                return "parsed"
            if (job := _job_of_module(module)) is not None:
                _parse(["run", job, *rest])
                return "parsed"
            if module == "pytest":
                for arg in rest:
                    if arg.startswith("tests/"):
                        assert (ROOT / arg.split("::")[0]).exists(), f"no such test file: {arg}"
                return "checked"
            if module == "pip":
                return check_command(["pip", *rest])
            raise AssertionError(f"python -m {module}: not a module the docs may run")
        if len(argv) > 1 and argv[1].endswith(".py"):
            assert (ROOT / argv[1]).is_file(), f"no such script: {argv[1]}"
            return "checked"
        raise AssertionError(f"unchecked python command: {shlex.join(argv)}")
    if name == "pip":
        assert argv[1] == "install", shlex.join(argv)
        for arg in argv[2:]:
            if m := re.fullmatch(r"(?:\.|privstream)\[([\w,-]+)\]", arg):
                unknown = set(m.group(1).split(",")) - _extras()
                assert not unknown, f"pip install {arg}: no such extra {sorted(unknown)}"
        return "checked"
    if name == "flink" and "-py" in argv:  # Flink's client: the options after the job file are the job's
        script = argv[argv.index("-py") + 1]
        module = "privstream.jobs." + Path(script).stem
        job = _job_of_module(module)
        assert job is not None and (ROOT / script).is_file(), f"flink run -py {script}: not a privstream job"
        _parse(["run", job, *argv[argv.index("-py") + 2 :]])
        return "parsed"
    if name in SHELL:
        return "shell"
    raise AssertionError(f"{argv[0]}: a command this test cannot check; mark the block <!-- not-run: why -->")


def _is_commands(block: Block) -> bool:
    """An unlabelled block is a shell block when its first line is a command this test knows."""
    first = next((line.split()[0] for line in block.code.splitlines() if line.strip()), "")
    return Path(first).name in {"privstream", "python", "python3", "pip"}


def _kind(block: Block) -> str:
    if block.not_run is not None:
        return "not-run"
    if block.lang == "python":
        return "python"
    if block.lang in SHELL_LANGUAGES or (block.lang == "" and _is_commands(block)):
        return "shell"
    if block.lang in {"", "text", "json", "yaml", "toml"}:
        return "text"
    return "unknown"


# ---- the tests ------------------------------------------------------------------------------------


def test_every_block_is_checked_or_says_why_not() -> None:
    kinds = {str(b): _kind(b) for b in BLOCKS}
    unknown = [f"{b} (```{b.lang})" for b in BLOCKS if kinds[str(b)] == "unknown"]
    assert not unknown, f"blocks of a language no test runs; mark them <!-- not-run: why -->: {unknown}"
    empty = [str(b) for b in BLOCKS if b.not_run == ""]
    assert not empty, f"<!-- not-run: --> needs a reason: {empty}"
    assert sum(k in {"python", "shell"} for k in kinds.values()) >= 30  # most blocks are checked
    assert any(b.page == "README.md" and b.lang == "python" for b in BLOCKS)


SHELL_BLOCKS = [b for b in BLOCKS if _kind(b) == "shell"]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=str)
def test_shell_block_commands_parse(block: Block) -> None:
    argvs = commands(block.code)
    assert argvs, f"{block}: no command"
    checked = [check_command(argv) for argv in argvs]
    assert any(c in {"parsed", "checked"} for c in checked), f"{block}: only plain shell commands"


PYTHON_HERE = [
    b
    for b in BLOCKS
    if _kind(b) == "python" and not (b.page in RUN_ELSEWHERE and b.index in RUN_ELSEWHERE[b.page][1])
]


@pytest.mark.parametrize("block", PYTHON_HERE, ids=str)
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    if "pyflink" in block.code or "privstream.flink" in block.code:
        pytest.importorskip("pyflink")
    code = PRELUDES.get((block.page, block.index), "") + block.code
    script = tmp_path / "block.py"
    script.write_text(code)
    # a child of its own: a block that registers a study, a sketch or a mechanism leaves no trace here
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, f"{block}:\n{done.stderr[-3000:]}"


def test_blocks_run_elsewhere_are_run_there() -> None:
    """The pages whose blocks another test runs: that test still reads the page and uses each block."""
    for page, (test, indexes) in RUN_ELSEWHERE.items():
        source = (ROOT / test).read_text()
        assert Path(page).name in source, (test, page)
        used = {int(i) for i in re.findall(r"BLOCKS\[(\d+)\]", source)}
        assert indexes <= used, f"{test} no longer runs {page}'s python blocks {sorted(indexes - used)}"
        on_page = [b for b in BLOCKS if b.page == page and b.lang == "python"]
        assert {b.index for b in on_page} - indexes <= {b.index for b in PYTHON_HERE if b.page == page}


def test_the_checker_catches_drift() -> None:
    """A renamed option, a job that does not exist, an unknown extra and a foreign command all fail."""
    for bad in (
        "privstream run heavy-hitters --epsilon 1 --no-such-option",
        "privstream run no-such-job --epsilon 1",
        "python -m privstream.jobs.heavy_hitters --k notanint",
        "pip install -e '.[no-such-extra]'",
        "docker compose up",
    ):
        with pytest.raises(AssertionError):
            for argv in commands(bad):
                check_command(argv)
    argvs = commands("A=$(python -c 'print(1)') privstream demo --count 10 && privstream --help | head  # x")
    assert argvs == [["privstream", "demo", "--count", "10"], ["privstream", "--help"], ["head"]]
    assert [check_command(a) for a in argvs] == ["parsed", "parsed", "shell"]


# ---- commands named in the prose ------------------------------------------------------------------

INLINE = re.compile(r"`(privstream (?:[a-z][\w-]*)[^`]*)`")


def check_mention(span: str) -> None:
    """A command named in prose (often with placeholders, so not parsed whole): its sub-commands and
    jobs exist, and every ``--option`` it names is an option of that (sub-)command."""
    import argparse

    from privstream.cli import build_parser

    parser: argparse.ArgumentParser = build_parser()
    for token in span.replace("\n", " ").split()[1:]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            parser = subs[0].choices[token]
        elif subs:
            return  # prose after the command name ("privstream run needs the …"): nothing to check
        elif token.startswith("--") and len(token) > 2:
            option = token.split("=")[0].rstrip(",.;:)")
            assert option in parser._option_string_actions, f"`{span}`: {parser.prog} has no {option}"


def _mentions() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        prose = FENCE.sub("", page.read_text())
        for m in INLINE.finditer(prose.replace("\n", " ")):
            out.append((str(page.relative_to(ROOT)), m.group(1)))
    return out


def test_commands_named_in_the_prose_exist() -> None:
    mentions = _mentions()
    assert len(mentions) > 50
    failures = []
    for page, span in mentions:
        try:
            check_mention(span)
        except AssertionError as exc:
            failures.append(f"{page}: {exc}")
    assert not failures, "\n".join(failures)
    with pytest.raises(AssertionError, match="no --no-such-option"):
        check_mention("privstream run heavy-hitters --k 16 --no-such-option")
