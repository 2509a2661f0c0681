"""What an hour of a host costs (HourlyPrice), or why it has no price (PriceProblem): the
answer of the catalog (greenops.costs.catalog) and of the team's overrides
(greenops.costs.overrides), which both build them."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # costs.models imports overrides, which imports this module
    from greenops.costs.models import Price


@dataclass(frozen=True)
class HourlyPrice:
    """What one host-hour costs under the host's purchase option."""

    usd_per_hour: float
    option: str
    source: str
    as_of: dt.datetime | None
    stale: bool
    # On-premises hosts add electricity on top of the amortised hardware per hour.
    # PUE is not the catalog's: it comes from the carbon app's site factors (one per host).
    electricity_usd_per_kwh: float | None = None
    price: Price | None = None


@dataclass(frozen=True)
class PriceProblem:
    code: str  # missing_price, unknown_instance_type, missing_on_prem_cost, no_instance_type
    message: str
