"""Local differential privacy: client-side randomisers and server-side frequency estimators.

Every randomiser implements :class:`LocalRandomiser` (``encode(value) -> LdpReport`` on the client,
an aggregator with an unbiased estimate on the server) and draws its randomness from
:class:`privstream.noise.rng.RandomSource` (the CSPRNG by default). Generalised randomised response
(:class:`GeneralizedRandomizedResponse`) is here now; the HG-LDP clients (Li et al., arXiv 2311.16062)
plug into the same interface.
"""

from privstream.ldp.grr import GeneralizedRandomizedResponse, GrrAggregator, rational_exp_lower
from privstream.ldp.randomiser import FrequencyAggregator, LdpReport, LocalRandomiser

__all__ = [
    "FrequencyAggregator",
    "GeneralizedRandomizedResponse",
    "GrrAggregator",
    "LdpReport",
    "LocalRandomiser",
    "rational_exp_lower",
]
