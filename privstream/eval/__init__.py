"""``privstream eval``: one evaluation harness for the papers privstream implements.

* :mod:`~privstream.eval.workloads` — streams: the papers' synthetic generators, CSV/JSON-lines
  files, real public datasets shipped in the optional ``datasets`` extra; user-level set streams;
* :mod:`~privstream.eval.metrics` — top-k and heavy-hitter precision/recall/F1, MAE/MRE on high-
  and low-frequency items, max error, coverage of a release's stated error bound, throughput, memory;
* :mod:`~privstream.eval.results` — CSV/JSON tables, summaries over repetitions, PNG plots;
* :mod:`~privstream.eval.claims` — the claims table (a paper's claim, the measured value, PASS/FAIL);
* :mod:`~privstream.eval.harness` — the study registry (:func:`register_study`) and runner
  (:func:`run_study`); :mod:`~privstream.eval.studies` — the built-in studies;
* :mod:`~privstream.eval.cli` — ``privstream eval``.

Evaluations draw release noise from seeded sources (``SeededRandomSource('eval:{seed}:...')``) so
that they are reproducible — on purpose, and only here: production releases use the OS CSPRNG.
"""

from privstream.eval.claims import Claim, Status
from privstream.eval.harness import (
    Settings,
    Study,
    StudyContext,
    StudyOutput,
    StudyRun,
    get_study,
    register_study,
    run_study,
    studies,
)
from privstream.eval.results import PlotSpec
from privstream.eval.workloads import Workload, load_workload, register_workload, user_sets

__all__ = [
    "Claim",
    "PlotSpec",
    "Settings",
    "Status",
    "Study",
    "StudyContext",
    "StudyOutput",
    "StudyRun",
    "Workload",
    "get_study",
    "load_workload",
    "register_study",
    "register_workload",
    "run_study",
    "studies",
    "user_sets",
]
