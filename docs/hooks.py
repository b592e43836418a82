"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``): the generated reference pages.

A page holding a marker line ``<!-- generated: NAME -->`` gets the Markdown that :data:`GENERATORS`
makes for NAME in its place, at build time, so the reference follows the code:

* ``cli``: every ``privstream`` sub-command and every ``privstream run <job>``, from the real argparse
  parsers (:func:`privstream.cli.build_parser`): usage, description and one row per option;
* ``avro``: every current schema of ``connectors/schemas/*.avsc``: its doc, fields (type, default,
  doc) and the older versions kept for reading old messages.

tests/test_docs_site.py builds the site (``mkdocs build --strict``) and checks both pages.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "connectors" / "schemas"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def _cell(text: object) -> str:
    """``text`` as one Markdown table cell: no line breaks, pipes escaped."""
    return re.sub(r"\s+", " ", str(text)).replace("|", "\\|").strip()


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


# ---- the command line -----------------------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, prog: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(``privstream run heavy-hitters``, its parser) for every (sub-)command, depth first."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{prog} {name}")


def _option_row(action: argparse.Action) -> str | None:
    if (
        isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        or action.help == argparse.SUPPRESS
    ):
        return None
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (action.choices and "{" + ",".join(map(str, action.choices)) + "}")
            names += " " + str(metavar or action.dest.upper())
    else:
        names = str(action.metavar or action.dest)
    default = action.default
    shown = (
        ""
        if default is None or default is argparse.SUPPRESS or action.nargs == 0 or default == []
        else _code(str(default))
    )
    text = (action.help or "").replace("%(default)s", str(default))
    text = text % vars(action) if "%(" in text else text
    if action.choices and not action.option_strings:
        text += f" (one of {', '.join(map(str, action.choices))})"
    required = " (required)" if action.required and action.option_strings else ""
    return f"| {_code(names)}{required} | {shown} | {_cell(text)} |"


def cli_markdown() -> str:
    """The command-line reference: one section per command, from the parsers the CLI runs."""
    from privstream.cli import build_parser

    out: list[str] = []
    for prog, parser in _commands(build_parser(), "privstream"):
        parser.prog = prog
        depth = min(prog.count(" ") + 1, 4)
        out.append(f"{'#' * (depth + 1)} {prog}\n")
        if parser.description:
            out.append(f"{parser.description}\n")
        first, *rest = parser.format_usage().removeprefix("usage: ").rstrip().splitlines()
        usage = "\n".join([first, *(line.removeprefix(" " * len("usage: ")) for line in rest)])
        out.append(f"```text\n{usage}\n```\n")
        rows = [row for action in parser._actions if (row := _option_row(action))]
        if rows:
            out.append("| option | default | meaning |\n|---|---|---|\n" + "\n".join(rows) + "\n")
        if parser.epilog:
            out.append(f"{parser.epilog}\n")
    return "\n".join(out)


# ---- the Avro schemas -----------------------------------------------------------------------------


def _avro_type(schema: Any) -> str:
    """A compact spelling of an Avro type: ``["null", "long"]`` → ``null | long``."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return " | ".join(_avro_type(s) for s in schema)
    kind = schema.get("type")
    if kind == "array":
        return f"array<{_avro_type(schema['items'])}>"
    if kind == "map":
        return f"map<{_avro_type(schema['values'])}>"
    if kind in ("record", "enum", "fixed"):
        extra = f" {{{', '.join(schema['symbols'])}}}" if kind == "enum" else ""
        return f"{kind} {schema['name']}{extra}"
    logical = schema.get("logicalType")
    return f"{kind} ({logical})" if logical else str(kind)


def _records(schema: Any) -> Iterator[dict[str, Any]]:
    """Every named record a schema defines, itself first (nested records follow their field)."""
    if isinstance(schema, list):
        for s in schema:
            yield from _records(s)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            yield schema
            for field in schema["fields"]:
                yield from _records(field["type"])
        elif schema.get("type") == "array":
            yield from _records(schema["items"])
        elif schema.get("type") == "map":
            yield from _records(schema["values"])


def _record_table(record: dict[str, Any]) -> str:
    rows = ["| field | type | default | doc |", "|---|---|---|---|"]
    for field in record["fields"]:
        default = _code(json.dumps(field["default"])) if "default" in field else ""
        rows.append(
            f"| `{field['name']}` | {_cell(_code(_avro_type(field['type'])))} | {default} "
            f"| {_cell(field.get('doc', ''))} |"
        )
    return "\n".join(rows)


def avro_markdown() -> str:
    """The Avro reference: every current schema, its nested records and its kept old versions."""
    current = sorted(p for p in SCHEMAS.glob("*.avsc") if not re.search(r"\.v\d+\.avsc$", p.name))
    out: list[str] = []
    for path in current:
        schema = json.loads(path.read_text())
        old = sorted(p.name for p in SCHEMAS.glob(f"{path.stem}.v*.avsc"))
        out.append(f"## {schema['name']}\n")
        out.append(f"`connectors/schemas/{path.name}`, `{schema.get('namespace', '')}.{schema['name']}`.")
        if old:
            out.append(f" Older versions kept for reading old messages: {', '.join(f'`{n}`' for n in old)}.")
        out.append("\n")
        if schema.get("doc"):
            out.append(f"{schema['doc']}\n")
        for i, record in enumerate(_records(schema)):
            if i:
                out.append(
                    f"Nested record `{record['name']}`"
                    + (f": {record['doc']}" if "doc" in record else "")
                    + "\n"
                )
            out.append(_record_table(record) + "\n")
    return "\n".join(out)


#: marker name -> the function making its Markdown
GENERATORS: dict[str, Callable[[], str]] = {"cli": cli_markdown, "avro": avro_markdown}


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated: NAME -->`` line replaced by its generated text."""
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown) if MARKER.search(markdown) else markdown
