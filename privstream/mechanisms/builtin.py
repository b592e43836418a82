"""The built-in mechanisms, registered in this order (the order of ``names()``/``MECHANISMS`` and
``auto``'s tie-break). A new mechanism is one module that builds its ``MECHANISM`` plus one entry
here (or a :func:`~privstream.mechanisms.registry.register` call of its own)."""

from __future__ import annotations

from privstream.mechanisms.chan_pmg import MECHANISM as CHAN_PMG
from privstream.mechanisms.chan_topk import MECHANISM as CHAN_TOPK
from privstream.mechanisms.exact_threshold import MECHANISM as EXACT_THRESHOLD
from privstream.mechanisms.gshm import MECHANISM as GSHM
from privstream.mechanisms.laplace_threshold import MECHANISM as LAPLACE_THRESHOLD
from privstream.mechanisms.pmg import MECHANISM as PMG
from privstream.mechanisms.pmg_standard import MECHANISM as PMG_STANDARD
from privstream.mechanisms.pure_topk import MECHANISM as PURE_TOPK
from privstream.mechanisms.registry import Mechanism, register

BUILTIN: tuple[Mechanism, ...] = tuple(
    register(m)
    for m in (PMG, PMG_STANDARD, GSHM, LAPLACE_THRESHOLD, PURE_TOPK, CHAN_TOPK, CHAN_PMG, EXACT_THRESHOLD)
)
