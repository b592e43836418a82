"""Sliding-window frequencies and heavy hitters with DPSW-Sketch (Wang, Wang, Chen, KDD 2024).

* :mod:`privstream.window.checkpoints` — the checkpoint list (Alg. 2 lines 1–4) and budget split
  (Lemma 4.1);
* :mod:`privstream.window.pcms` — the private Count-Min sketch (Alg. 1) with exact discrete Gaussian
  noise drawn at creation;
* :mod:`privstream.window.params` — validated public parameters, ρ from (ε, δ) by Eq. (1), the
  windowing (count-based or event-time) and the guarantee with its neighbour relation;
* :mod:`privstream.window.dpsw` — DPSW-Sketch maintenance (Alg. 2) and queries (Alg. 3, corrected);
* :mod:`privstream.window.kernels` — the compiled batch update;
* :mod:`privstream.window.state` — the versioned binary state format.

No Flink or Kafka imports here; docs/sliding-window.md describes the algorithm and its privacy.
"""

from privstream.window.checkpoints import budget_split, checkpoint_list, substream_total, suffix_starts
from privstream.window.dpsw import DPSWSketch, Used
from privstream.window.params import DPSWParams, WindowGuarantee, Windowing, dpsw_params, rho_from
from privstream.window.pcms import PCMS, discrete_gaussian_noise
from privstream.window.state import DPSW_STATE_CODE

__all__ = [
    "DPSW_STATE_CODE",
    "PCMS",
    "DPSWParams",
    "DPSWSketch",
    "Used",
    "WindowGuarantee",
    "Windowing",
    "budget_split",
    "checkpoint_list",
    "discrete_gaussian_noise",
    "dpsw_params",
    "rho_from",
    "substream_total",
    "suffix_starts",
]
