"""Privacy accounting: (ε, δ) and zCDP budgets, conversions, composition and a persistent ledger."""

from privstream.accounting.budget import (
    AnyBudget,
    Budget,
    ZCDPBudget,
    compose_parallel,
    compose_sequential,
    dp_to_zcdp,
    pure_dp_to_zcdp,
    zcdp_to_dp,
)
from privstream.accounting.ledger import (
    BudgetExceeded,
    LedgerEntry,
    LedgerFormatError,
    PrivacyLedger,
    RunningTotals,
    is_parallel,
    most_advanced,
    parallel_epochs,
)

__all__ = [
    "AnyBudget",
    "Budget",
    "BudgetExceeded",
    "LedgerEntry",
    "LedgerFormatError",
    "PrivacyLedger",
    "RunningTotals",
    "ZCDPBudget",
    "is_parallel",
    "parallel_epochs",
    "compose_parallel",
    "compose_sequential",
    "dp_to_zcdp",
    "most_advanced",
    "pure_dp_to_zcdp",
    "zcdp_to_dp",
]
