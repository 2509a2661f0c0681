"""codecarbon experiments, runs and their emissions: recording what the client or a CSV sends,
and reading runs back with their totals.

codecarbon sends each emissions row as the delta since its previous send, so a run's energy and
emissions are the sums of its rows. The figures are codecarbon's own (it computed emissions on
the user's machine with its intensity and PUE); GreenOps stores them as received and labels them.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, QuerySet, Sum

from greenops.carbon.models import Emission, Experiment, Run, Source
from greenops.errors import FieldError
from greenops.teams.models import Team

RUN_FIELDS = ("os", "python_version", "codecarbon_version", "cpu_count", "cpu_model", "gpu_count",
              "gpu_model", "longitude", "latitude", "region", "provider", "tracking_mode",
              "project_name", "country_name", "country_iso_code", "cloud_region", "pue",
              "ram_total_size_gb")
EXPERIMENT_FIELDS = ("description", "project_id", "on_cloud", "country_name", "country_iso_code",
                     "region", "cloud_provider", "cloud_region")
EMISSION_FIELDS = ("duration_s", "emissions_kg", "emissions_rate_kg_per_s", "cpu_power_w",
                   "gpu_power_w", "ram_power_w", "cpu_energy_kwh", "gpu_energy_kwh",
                   "ram_energy_kwh", "energy_consumed_kwh", "cpu_utilization_pct",
                   "gpu_utilization_pct", "ram_utilization_pct")


def not_found(field: str, message: str) -> FieldError:
    return FieldError(404, "not_found", field, message)


def _clean(values: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    # Optional text fields arrive as null from the client; the columns store "" for unknown.
    out = {}
    for name in names:
        if name in values:
            value = values[name]
            out[name] = "" if value is None and name not in _NULLABLE else value
    return out


_NULLABLE = {"cpu_count", "gpu_count", "longitude", "latitude", "pue", "ram_total_size_gb",
             "cpu_utilization_pct", "gpu_utilization_pct", "ram_utilization_pct", "on_cloud"}


def experiment_for(team: Team, external_id: uuid.UUID, **fields: Any) -> Experiment:
    """The team's experiment with this codecarbon id, created on first use: the tracker only
    knows the id from its config, so a run may name an experiment nobody created here."""
    defaults = {"name": f"codecarbon experiment {str(external_id)[:8]}", **fields}
    if defaults.get("on_cloud") is None:
        defaults["on_cloud"] = False
    try:
        with transaction.atomic():
            exp, _ = Experiment.objects.get_or_create(team=team, external_id=external_id,
                                                      defaults=defaults)
    except IntegrityError:  # created concurrently by another request
        exp = Experiment.objects.get(team=team, external_id=external_id)
    return exp


def create_experiment(team: Team, external_id: uuid.UUID | None, name: str,
                      values: dict[str, Any]) -> Experiment:
    fields = _clean(values, EXPERIMENT_FIELDS)
    exp = experiment_for(team, external_id or uuid.uuid4(), name=name, **fields)
    changed = {k: v for k, v in {"name": name, **fields}.items() if getattr(exp, k) != v}
    if changed:
        for k, v in changed.items():
            setattr(exp, k, v)
        exp.save(update_fields=list(changed))
    return exp


def create_client_run(team: Team, experiment_id: uuid.UUID, started_at: dt.datetime,
                      values: dict[str, Any]) -> Run:
    """POST /runs from the codecarbon client: a new run with a server-chosen id."""
    exp = experiment_for(team, experiment_id)
    run_id = uuid.uuid4()
    fields = _clean(values, RUN_FIELDS)
    fields.setdefault("country_name", exp.country_name)
    fields.setdefault("country_iso_code", exp.country_iso_code)
    return Run.objects.create(id=run_id, codecarbon_run_id=run_id, team=team, experiment=exp,
                              source=Source.CLIENT, started_at=started_at, **fields)


def team_run(team: Team, run_id: uuid.UUID) -> Run:
    run = Run.objects.filter(team=team, codecarbon_run_id=run_id).first()
    if run is None:  # another team's run does not exist for this caller
        raise not_found("run_id", f"no run {run_id}; create it with POST /runs first")
    return run


def add_emission(run: Run, timestamp: dt.datetime, values: dict[str, Any]) -> Emission:
    """One delta row. A resend with the same timestamp is a no-op (natural key run+timestamp)."""
    fields = _clean(values, EMISSION_FIELDS)
    emission, _ = Emission.objects.get_or_create(run=run, timestamp=timestamp, defaults=fields)
    return emission


def runs_with_totals(team: Team) -> QuerySet[Run]:
    return (
        Run.objects.filter(team=team)
        .select_related("experiment")
        .annotate(
            duration_s=Sum("emissions__duration_s"),
            cpu_energy_kwh=Sum("emissions__cpu_energy_kwh"),
            gpu_energy_kwh=Sum("emissions__gpu_energy_kwh"),
            ram_energy_kwh=Sum("emissions__ram_energy_kwh"),
            energy_kwh=Sum("emissions__energy_consumed_kwh"),
            emissions_kg=Sum("emissions__emissions_kg"),
            rows=Count("emissions"),
        )
        .order_by("-started_at")
    )
