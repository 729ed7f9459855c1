"""Price book and egress records: the facts the cost engine reads.

One module per concern; every model is importable from here, as before."""

from __future__ import annotations

from billing.models.costs import (
    COST_AMOUNTS,
    AccrualBaseline,
    CostAmounts,
    CostDaily,
    CostDailyTeam,
    EgressRecord,
    FailedRunCost,
    RollupState,
    RunCostFigure,
    RunCostSpan,
)
from billing.models.policies import (
    Admission,
    AlertChannel,
    BudgetAlert,
    Delivery,
    PolicyAction,
    PolicyVersion,
    UsagePolicy,
    default_alert_thresholds,
    default_forecast_thresholds,
)
from billing.models.prices import AcceleratorPrice, EgressPrice, InstancePrice, PriceChange
from billing.models.reconcile import BilledUsage, BillingListPrice

__all__ = [
    "COST_AMOUNTS",
    "AcceleratorPrice",
    "AccrualBaseline",
    "Admission",
    "AlertChannel",
    "BilledUsage",
    "BillingListPrice",
    "BudgetAlert",
    "CostAmounts",
    "CostDaily",
    "CostDailyTeam",
    "Delivery",
    "EgressPrice",
    "EgressRecord",
    "FailedRunCost",
    "InstancePrice",
    "PolicyAction",
    "PolicyVersion",
    "PriceChange",
    "RollupState",
    "RunCostFigure",
    "RunCostSpan",
    "UsagePolicy",
    "default_alert_thresholds",
    "default_forecast_thresholds",
]
