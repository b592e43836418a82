"""Command lines generated from typed settings: each option is declared once, on its field.

A frozen dataclass of settings marks a field as a command-line option with :func:`option` in the
field's metadata (help text, and how the text becomes the field's value); a field whose type is
another settings dataclass marked with :func:`nested` contributes that class's options. Then

* :func:`add_options` adds one argparse option per marked field (``--field-name`` unless named
  otherwise; required exactly when the field has no default; the help shows the field's default);
* :func:`from_args` builds the settings from the parsed arguments: an option not given leaves the
  field's default, values no option sets (e.g. a topic's partition count) are passed in.

So a job's options, their defaults and their checks live in its config class alone; the command
line, the programmatic constructor and the error messages cannot disagree. Errors of conversion name
the option (``--epoch: expected …``); checks of the value are the dataclass's own ``__post_init__``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass
from datetime import timedelta
from typing import Any

#: ``parse(text, option, args)``: the field's value from its option's text (``args``: the whole parsed
#: command line, for options whose meaning depends on another, e.g. ``--window`` on ``--windowing``).
Parse = Callable[[str, str, argparse.Namespace], Any]


@dataclass(frozen=True)
class Alternative:
    """Another spelling of the same field, exclusive with the main option (e.g. ``--warm-up FILE``
    or ``--warm-up-normal N``)."""

    name: str
    help: str
    parse: Parse
    metavar: str | None = None


@dataclass(frozen=True)
class Option:
    """How a settings field appears on the command line (see :func:`option`)."""

    help: str
    name: str | None = None
    parse: Parse | None = None
    kind: type | Callable[[str], Any] | None = None
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    metavar: str | None = None
    repeat: bool = False
    switch: bool = False
    default_text: str | None = None
    alternatives: tuple[Alternative, ...] = ()

    def flag(self, field_name: str) -> str:
        return self.name or "--" + field_name.replace("_", "-")


_OPTION = "privstream.option"
_NESTED = "privstream.nested"


def option(
    help: str,
    *,
    name: str | None = None,
    parse: Parse | None = None,
    kind: type | Callable[[str], Any] | None = None,
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
    metavar: str | None = None,
    repeat: bool = False,
    switch: bool = False,
    default_text: str | None = None,
    alternatives: tuple[Alternative, ...] = (),
) -> dict[str, Option]:
    """Field metadata declaring a command-line option.

    ``kind``: argparse's ``type`` (int, float, or a callable raising ``ArgumentTypeError``);
    ``parse``: a conversion that needs the option's name or the other arguments (it raises
    ``ValueError`` naming the option); ``choices`` may be a callable read when the parser is built;
    ``repeat``: the option may be given several times (``parse`` gets each text, the field a tuple);
    ``switch``: a flag without a value (True when given); ``default_text``: the help's default when
    the field's own default (often None) does not say it, e.g. ``"<topic>-dlq"``."""
    return {
        _OPTION: Option(help, name, parse, kind, choices, metavar, repeat, switch, default_text, alternatives)
    }


def nested() -> dict[str, bool]:
    """Field metadata: the field is a settings dataclass whose options belong to this command."""
    return {_NESTED: True}


def _show(value: object) -> str:
    if isinstance(value, timedelta):
        ms = value // timedelta(milliseconds=1)
        for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
            if ms and ms % size == 0:
                return f"{ms // size}{unit}"
        return f"{ms}ms"
    return str(value)


def _default(f: dataclasses.Field) -> object:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _own_first(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls``: those it declares first, then each base's in the order the bases are
    listed (the shared settings after the job's own)."""
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    out: list[dataclasses.Field] = []
    for klass in cls.__mro__:
        for name in klass.__dict__.get("__annotations__", {}):
            if name in by_name and by_name[name] not in out:
                out.append(by_name[name])
    return out


def _settings_class(f: dataclasses.Field, owner: type) -> type:
    import typing

    hints = typing.get_type_hints(owner)
    return hints[f.name]


def declared(cls: type) -> list[tuple[dataclasses.Field, Option]]:
    """Every (field, option) of ``cls`` and of its nested settings, in command-line order."""
    out: list[tuple[dataclasses.Field, Option]] = []
    for f in _own_first(cls):
        if f.metadata.get(_NESTED):
            out += declared(_settings_class(f, cls))
        elif _OPTION in f.metadata:
            out.append((f, f.metadata[_OPTION]))
    return out


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per declared field of ``cls`` (and of its nested settings)."""
    for f, opt in declared(cls):
        default = _default(f)
        shown = opt.default_text or (None if default in (MISSING, None, ()) else _show(default))
        text = opt.help + (f" (default: {shown})" if shown and not opt.switch else "")
        text = text.replace("%", "%%")  # argparse formats help text with %
        if opt.alternatives:
            group = parser.add_mutually_exclusive_group(required=default is MISSING)
            group.add_argument(opt.flag(f.name), dest=f.name, help=text, metavar=opt.metavar)
            for alt in opt.alternatives:
                group.add_argument(alt.name, help=alt.help.replace("%", "%%"), metavar=alt.metavar)
            continue
        kwargs: dict[str, Any] = {"dest": f.name, "help": text}
        if opt.switch:
            parser.add_argument(opt.flag(f.name), action="store_true", default=None, **kwargs)
            continue
        if opt.repeat:
            kwargs["action"] = "append"
        if opt.kind is not None:
            kwargs["type"] = opt.kind
        choices = opt.choices() if callable(opt.choices) else opt.choices
        if choices is not None:
            kwargs["choices"] = tuple(choices)
        if choices is None:  # named after the option, not the field (--step STEP, not STEP_MS)
            kwargs["metavar"] = opt.metavar or opt.flag(f.name).lstrip("-").upper().replace("-", "_")
        # a plain value's default is in the namespace too (``args.bootstrap`` reads as the command
        # line means it); one that needs ``parse`` is None there and the field keeps its default
        plain = opt.parse is None and not opt.repeat and default is not MISSING
        parser.add_argument(
            opt.flag(f.name), required=default is MISSING, default=default if plain else None, **kwargs
        )


def from_args(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """``cls`` built from parsed ``args``: declared options that were given, ``given`` for the fields
    no option sets (passed down to nested settings that have such a field), defaults otherwise."""
    values: dict[str, Any] = {}
    for f in _own_first(cls):
        if f.metadata.get(_NESTED):
            inner = _settings_class(f, cls)
            names = {g.name for g in dataclasses.fields(inner)}
            values[f.name] = from_args(inner, args, **{k: v for k, v in given.items() if k in names})
            continue
        opt = f.metadata.get(_OPTION)
        if opt is None:
            if f.name in given:
                values[f.name] = given[f.name]
            continue
        value = _value(f.name, opt, args)
        if value is not None:
            values[f.name] = value
    return cls(**values)


def _value(name: str, opt: Option, args: argparse.Namespace) -> Any:
    text = getattr(args, name, None)
    for alt in opt.alternatives:
        alt_text = getattr(args, alt.name.lstrip("-").replace("-", "_"), None)
        if alt_text is not None:
            return alt.parse(alt_text, alt.name, args)
    if text is None:
        return None
    flag = opt.flag(name)
    if opt.repeat:
        return tuple(opt.parse(t, flag, args) for t in text) if opt.parse else tuple(text)
    return opt.parse(text, flag, args) if opt.parse else text


def int_list(text: str, option: str, _args: argparse.Namespace | None = None) -> tuple[int, ...]:
    """``"1,2,3"`` as ``(1, 2, 3)`` (ValueError naming ``option``)."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{option}: a comma-separated list of integers, got {text!r}") from None
