"""privstream's public PyFlink API: private operators a user drops into their own pipeline.

>>> from privstream.flink import CountEpochs, InMemoryLedger, private_heavy_hitters
>>> from privstream.flink import private_sliding_window
>>> from privstream.flink import LdpServerSettings, private_ldp_heavy_hitters
>>> from privstream.flink import private_continual_heavy_hitters  # PDCH-LU / PDCH-BF
>>> from privstream.flink import private_top_items  # Table API / SQL

Needs the ``flink`` extra (``pip install 'privstream[flink]'``); the core (``privstream`` without
this package) never imports Flink. Each operator takes a ``DataStream`` of plain values or tuples and
returns ``DataStream``s of the core's typed release objects (docs/operators.md).
"""

from privstream.flink.continual import PrivateContinualHeavyHitters, private_continual_heavy_hitters
from privstream.flink.heavy_hitters import (
    InMemoryLedger,
    KafkaLedger,
    PrivateHeavyHitters,
    private_heavy_hitters,
)
from privstream.flink.ldp import PrivateLdpHeavyHitters, private_ldp_heavy_hitters
from privstream.flink.sliding_window import PrivateSlidingWindow, private_sliding_window
from privstream.flink.sql import private_top_items
from privstream.flink.streams import Punctuation
from privstream.operators.epochs import CountEpochs, TimeEpochs
from privstream.operators.ldp_logic import LdpServerSettings
from privstream.operators.release_logic import ReleaseRefusal
from privstream.operators.shard_operator import Rejected

__all__ = [
    "CountEpochs",
    "InMemoryLedger",
    "KafkaLedger",
    "LdpServerSettings",
    "PrivateContinualHeavyHitters",
    "PrivateHeavyHitters",
    "PrivateLdpHeavyHitters",
    "PrivateSlidingWindow",
    "Punctuation",
    "Rejected",
    "ReleaseRefusal",
    "TimeEpochs",
    "private_continual_heavy_hitters",
    "private_heavy_hitters",
    "private_ldp_heavy_hitters",
    "private_sliding_window",
    "private_top_items",
]
