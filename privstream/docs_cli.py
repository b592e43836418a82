"""``privstream docs``: read the documentation site locally (the ``docs`` extra: MkDocs + Material).

    privstream docs                    # serve it on http://127.0.0.1:8000/, rebuilt on every edit
    privstream docs --build DIR        # write the static site to DIR (open DIR/index.html)

Both run MkDocs on the checkout's ``mkdocs.yml`` with ``--strict``: any warning (a broken link, a
missing anchor, an unresolved API reference) fails the build. The site is built from ``docs/`` of a
source checkout (``pip install -e '.[docs]'``); an installed wheel carries no ``docs/``, so
``--config`` names the ``mkdocs.yml`` then. The API pages import ``privstream.flink``: install the
``flink`` extra too for them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: the checkout's mkdocs.yml when privstream is installed from it (``pip install -e .``)
CHECKOUT_CONFIG = Path(__file__).resolve().parents[1] / "mkdocs.yml"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build",
        metavar="DIR",
        help="write the static site to DIR and exit (default: serve it locally, rebuilt on every edit)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="the site's mkdocs.yml (default: ./mkdocs.yml, else the checkout privstream runs from)",
    )
    parser.add_argument("--addr", default="127.0.0.1:8000", help="address to serve on (default %(default)s)")


def find_config(given: str | None) -> Path | None:
    """The mkdocs.yml to build: ``given``, else ./mkdocs.yml, else the checkout's; None if none exists."""
    candidates = [Path(given)] if given else [Path.cwd() / "mkdocs.yml", CHECKOUT_CONFIG]
    return next((path.resolve() for path in candidates if path.is_file()), None)


def _log_to_stderr() -> None:
    """MkDocs' messages (its warnings name the page and the broken link) as its own CLI prints them."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)-7s -  %(message)s"))
    logger = logging.getLogger("mkdocs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def run(args: argparse.Namespace) -> int:
    config = find_config(args.config)
    if config is None:
        where = args.config or f"./mkdocs.yml or {CHECKOUT_CONFIG}"
        print(
            f"privstream docs: no site configuration at {where} (run it in a source checkout)",
            file=sys.stderr,
        )
        return 2
    _log_to_stderr()
    from mkdocs.commands import build, serve
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort, ConfigurationError

    try:
        if args.build:
            site = Path(args.build).resolve()
            build.build(load_config(str(config), strict=True, site_dir=str(site)))
            print(f"privstream docs: built {site}/index.html")
        else:
            serve.serve(str(config), strict=True, dev_addr=args.addr)
    except (Abort, ConfigurationError) as exc:
        print(f"privstream docs: {exc}", file=sys.stderr)
        return 1
    return 0
