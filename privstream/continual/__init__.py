"""Continual (sliding-window) heavy hitters: Chan, Li, Shi, Xu, "Differentially Private Continual
Monitoring of Heavy Hitters from Distributed Streams".

* :mod:`privstream.continual.blocks` — PCC's dyadic block structure and public parameters;
* :mod:`privstream.continual.pcc` — PCC (one stream, Lemma 3) and PMG's per-block release;
* :mod:`privstream.continual.lazy_update` — PDCH-LU's node and aggregator (Alg. 2, Theorem 1);
* :mod:`privstream.continual.bloom` — the secure Bloom-filter count tables (§4.2, Theorem 2);
* :mod:`privstream.continual.masking` — pairwise-masking private aggregation (the §4.1 black box);
* :mod:`privstream.continual.pdch_bf` — PDCH-BF's node and aggregator (§4.3).

Every protocol steps with one item (``step``, Remark 1) or with any number of items per time step
(``step_items``; steps cut by data-independent punctuations, see :mod:`privstream.continual.pcc`).
"""

from privstream.continual.blocks import (
    BlockId,
    PccParams,
    completed_at,
    is_expired,
    pcc_params,
    window_cover,
)
from privstream.continual.lazy_update import LazyUpdateAggregator, LazyUpdateNode, Message
from privstream.continual.masking import MaskingNode, Roster, generate_private_key, public_key_bytes
from privstream.continual.pcc import PCC, ContinualGuarantee, pmg_release
from privstream.continual.pdch_bf import (
    BfMessage,
    BlockUnavailableError,
    PdchBfAggregator,
    PdchBfConfig,
    PdchBfNode,
    pdch_bf_config,
)

__all__ = [
    "PCC",
    "BfMessage",
    "BlockId",
    "BlockUnavailableError",
    "ContinualGuarantee",
    "LazyUpdateAggregator",
    "LazyUpdateNode",
    "MaskingNode",
    "Message",
    "PccParams",
    "PdchBfAggregator",
    "PdchBfConfig",
    "PdchBfNode",
    "Roster",
    "completed_at",
    "generate_private_key",
    "is_expired",
    "pcc_params",
    "pdch_bf_config",
    "pmg_release",
    "public_key_bytes",
    "window_cover",
]
