"""Local differential privacy: client-side randomisers and server-side frequency estimators.

Every randomiser implements :class:`LocalRandomiser` (``encode(value) -> LdpReport`` on the client,
an aggregator with an unbiased estimate on the server) and draws its randomness from
:class:`privstream.noise.rng.RandomSource` (the CSPRNG by default). Generalised randomised response
(:class:`GeneralizedRandomizedResponse`), optimised local hashing (:mod:`~privstream.ldp.olh`) and
Hadamard response (:mod:`~privstream.ldp.hadamard`) are the memory-unlimited frequency oracles; the
HG-LDP schemes BGR, DSR, BDR, CNR (Li et al., arXiv 2311.16062) are clients in
:mod:`~privstream.ldp.hg_clients` and a bounded-memory HeavyGuardian server in
:mod:`~privstream.ldp.hg_server`. docs/ldp.md describes them.
"""

from privstream.ldp.grr import GeneralizedRandomizedResponse, GrrAggregator, rational_exp_lower
from privstream.ldp.hadamard import HadamardResponse, HrAggregator
from privstream.ldp.heavy_guardian import HeavyGuardian
from privstream.ldp.hg_clients import BdrClient, BgrClient, CnrClient, DsrClient, HgLdpClient, make_client
from privstream.ldp.hg_params import SCHEMES, HgLdpParams
from privstream.ldp.hg_server import HgLdpServer, InconsistentReportError, refusal_reason
from privstream.ldp.hg_state import PublicState, StaleStateError, StateDigestError, StateHistory
from privstream.ldp.olh import OlhAggregator, OptimisedLocalHashing
from privstream.ldp.randomiser import FrequencyAggregator, LdpReport, LocalRandomiser

__all__ = [
    "SCHEMES",
    "BdrClient",
    "BgrClient",
    "CnrClient",
    "DsrClient",
    "FrequencyAggregator",
    "HadamardResponse",
    "HeavyGuardian",
    "HgLdpClient",
    "HgLdpParams",
    "HgLdpServer",
    "HrAggregator",
    "InconsistentReportError",
    "OlhAggregator",
    "OptimisedLocalHashing",
    "PublicState",
    "StaleStateError",
    "StateDigestError",
    "StateHistory",
    "make_client",
    "refusal_reason",
    "GeneralizedRandomizedResponse",
    "GrrAggregator",
    "LdpReport",
    "LocalRandomiser",
    "rational_exp_lower",
]
