"""Creating and editing a team's sites (PUE, grid-intensity override, location) in the product,
not in the admin. Admins and owners (sites.manage); every change is in the audit log."""

from __future__ import annotations

from django import forms
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from greenops.carbon.models import Site
from greenops.teams import audit
from greenops.teams.models import AuditEvent, Team
from greenops.teams.permissions import team_permission

FIELDS = ["name", "pue", "grid_intensity_override_g_per_kwh", "override_source", "provider",
          "region", "country", "supplier_intensity_g_per_kwh", "supplier_intensity_source",
          "supplier_intensity_year", "embodied_co2e_g_per_gpu_hour", "embodied_source"]


class SiteForm(forms.ModelForm):
    class Meta:
        model = Site
        fields = FIELDS
        labels = {"pue": "PUE (blank: the server's default)",
                  "grid_intensity_override_g_per_kwh": "Grid intensity override (g CO2e/kWh)",
                  "supplier_intensity_g_per_kwh": "Supplier factor (g CO2e/kWh, market-based)",
                  "embodied_co2e_g_per_gpu_hour": "Embodied (g CO2e per GPU-hour)"}

    def __init__(self, *args, team: Team, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.team = team

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        clash = Site.objects.filter(team=self.team, name=name).exclude(id=self.instance.id)
        if clash.exists():
            raise forms.ValidationError("The team already has a site with this name.")
        return name

    def clean_country(self) -> str:
        value = self.cleaned_data["country"].strip().upper()
        if value and (len(value) != 3 or not value.isalpha()):
            raise forms.ValidationError("An ISO 3166 alpha-3 code, e.g. USA or DEU.")
        return value

    def clean(self) -> dict:
        data = super().clean()
        if data.get("grid_intensity_override_g_per_kwh") is not None \
                and not data.get("override_source"):
            self.add_error("override_source", "Say where the override figure comes from.")
        return data


def _save(request: HttpRequest, team: Team, site: Site | None) -> HttpResponse:
    form = SiteForm(request.POST or None, instance=site, team=team)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            changes = {f: [form.initial.get(f), form.cleaned_data.get(f)]
                       for f in form.changed_data}
            row = form.save(commit=False)
            row.team = team
            row.save()
            action = AuditEvent.Action.SITE_CHANGED if site else AuditEvent.Action.SITE_CREATED
            audit.record(team, request.user, action, row.name, site_id=row.id,
                         changes={k: [_plain(a), _plain(b)] for k, (a, b) in changes.items()})
        return redirect("carbon-sites", team.slug)
    return render(request, "carbon/site_form.html", {"team": team, "site": site, "form": form},
                  status=400 if form.is_bound else 200)


@team_permission("sites.manage")
def site_create(request: HttpRequest, team: Team) -> HttpResponse:
    return _save(request, team, None)


@team_permission("sites.manage")
def site_edit(request: HttpRequest, team: Team, site_id: int) -> HttpResponse:
    return _save(request, team, get_object_or_404(Site, team=team, id=site_id))


def _plain(value):
    return value if value is None or isinstance(value, (int, float, str)) else str(value)
