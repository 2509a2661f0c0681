"""The team's price overrides page: list what is in force and what ended, set one, end one.
Admins and owners change prices (prices.manage); everyone in the team sees them."""

from __future__ import annotations

from django import forms
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from greenops.costs.overrides import OverrideKind, PriceOverride
from greenops.teams import audit
from greenops.teams.models import AuditEvent, Team
from greenops.teams.permissions import allows, team_permission
from greenops.telemetry.models import PurchaseOption


class PriceOverrideForm(forms.ModelForm):
    class Meta:
        model = PriceOverride
        fields = ["kind", "instance_type", "purchase_option", "usd_per_hour", "discount_pct",
                  "electricity_usd_per_kwh", "source", "valid_from"]
        labels = {"usd_per_hour": "$ per hour (per host)", "discount_pct": "Discount (%)",
                  "electricity_usd_per_kwh": "Electricity ($/kWh)",
                  "instance_type": "Instance type (blank: every type)",
                  "valid_from": "In force from (UTC)"}
        help_texts = {"valid_from": "Hours from then on are costed at this price: set it to "
                                    "the contract's start to price a host's past hours too."}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["valid_from"].initial = timezone.now().replace(second=0, microsecond=0)

    def clean(self) -> dict:
        data = super().clean()
        kind = data.get("kind")
        # Each kind needs its own figure and must not carry another kind's: errors name the
        # field to fix.
        if kind in (OverrideKind.HOURLY, OverrideKind.ON_PREM) and data.get("usd_per_hour") is None:
            self.add_error("usd_per_hour", "Give the hourly price of one host.")
        if kind == OverrideKind.HOURLY and not data.get("instance_type"):
            self.add_error("instance_type", "A custom rate is for one instance type.")
        if kind == OverrideKind.DISCOUNT and data.get("discount_pct") is None:
            self.add_error("discount_pct", "Give the discount in percent.")
        if kind != OverrideKind.DISCOUNT and data.get("discount_pct") is not None:
            self.add_error("discount_pct", "Only a discount override takes a percentage.")
        if kind != OverrideKind.ON_PREM and data.get("electricity_usd_per_kwh") is not None:
            self.add_error("electricity_usd_per_kwh",
                           "Electricity is ours to pay only on premises.")
        if kind == OverrideKind.ON_PREM:
            data["purchase_option"] = PurchaseOption.ON_PREM
        if kind == OverrideKind.DISCOUNT and data.get("usd_per_hour") is not None:
            self.add_error("usd_per_hour", "A discount applies to list prices: leave blank.")
        return data


def _page(request: HttpRequest, team: Team, form: PriceOverrideForm | None,
          status: int = 200) -> HttpResponse:
    rows = list(PriceOverride.objects.filter(team=team).select_related("created_by"))
    now = timezone.now()
    return render(request, "costs/price_overrides.html", {
        "team": team, "form": form,
        "current": [r for r in rows if r.valid_until is None or r.valid_until > now],
        "ended": [r for r in rows if r.valid_until is not None and r.valid_until <= now],
    }, status=status)


@team_permission("team.view")
def price_overrides(request: HttpRequest, team: Team) -> HttpResponse:
    can_edit = allows(request.team_role, "prices.manage")
    return _page(request, team, PriceOverrideForm() if can_edit else None)


@require_POST
@team_permission("prices.manage")
def add_price_override(request: HttpRequest, team: Team) -> HttpResponse:
    form = PriceOverrideForm(request.POST)
    if not form.is_valid():
        return _page(request, team, form, status=400)
    with transaction.atomic():
        row = form.save(commit=False)
        row.team, row.created_by = team, request.user
        row.save()
        audit.record(team, request.user, AuditEvent.Action.PRICE_OVERRIDE_SET, str(row),
                     override_id=row.id, kind=row.kind, instance_type=row.instance_type,
                     purchase_option=row.purchase_option, usd_per_hour=_str(row.usd_per_hour),
                     discount_pct=_str(row.discount_pct),
                     electricity_usd_per_kwh=_str(row.electricity_usd_per_kwh),
                     source=row.source, valid_from=row.valid_from.isoformat())
    return redirect("price-overrides", team.slug)


@require_POST
@team_permission("prices.manage")
def end_price_override(request: HttpRequest, team: Team, override_id: int) -> HttpResponse:
    row = get_object_or_404(PriceOverride, team=team, id=override_id)
    with transaction.atomic():
        if row.end():
            audit.record(team, request.user, AuditEvent.Action.PRICE_OVERRIDE_ENDED, str(row),
                         override_id=row.id, valid_until=row.valid_until.isoformat())
    return redirect("price-overrides", team.slug)


def _str(value) -> str | None:
    return None if value is None else str(value)
