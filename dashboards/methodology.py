"""The methodology page (/methodology/): how carbon and cost are computed, with the factors and
thresholds the carbon and costs apps use. A page over both apps, so it lives with the pages."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from greenops.carbon import intensity
from greenops.costs.accounting import IDLE_UTIL_PCT
from greenops.costs.team_recommendations import (
    BASIS_DAYS,
    IDLE_HOURS,
    IDLE_SHARE,
    MIN_COMMIT_DAYS,
)


@login_required
def methodology(request: HttpRequest) -> HttpResponse:
    regions = [
        {"row": row, "intensity": intensity.resolve(provider=row.provider, region=row.region)}
        for row in intensity.cloud_regions().values()
    ]
    return render(request, "carbon/methodology.html", {
        "codecarbon_version": intensity.codecarbon_version(),
        "default_pue": settings.GREENOPS_DEFAULT_PUE,
        "idle_threshold_pct": IDLE_UTIL_PCT,
        "idle_hours": IDLE_HOURS,
        "idle_share_pct": round(IDLE_SHARE * 100),
        "min_commit_days": MIN_COMMIT_DAYS,
        "savings_basis_days": BASIS_DAYS,
        "world_average": intensity.world_average(),
        "regions": regions,
        "files": [intensity.COUNTRY_FILE, intensity.US_STATE_FILE, intensity.GCP_FILE,
                  intensity.WORLD_FILE],
    })
