"""Importing emissions.csv files written by codecarbon 2.x and 3.x.

codecarbon's FileOutput writes one row per tracker stop with the run's *totals* (its
EmissionsData, columns in dataclass field order). 3.x added water_consumed, the utilisation
columns, ram_used_gb and wue. A run_id can appear on several rows (append mode, a tracker stopped
more than once); its totals only grow, so the row with the longest duration is the run.

The whole file is validated before anything is stored; an error names the line and column.
Timestamps are the writing machine's local time without a zone (datetime.now()); they are
stored as UTC and the page says so.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import uuid
from dataclasses import dataclass, field

from django.db import transaction

from greenops.carbon import runs
from greenops.carbon.models import Run, Source
from greenops.errors import FieldError
from greenops.teams.models import Team

V2_COLUMNS = (
    "timestamp", "project_name", "run_id", "experiment_id", "duration", "emissions",
    "emissions_rate", "cpu_power", "gpu_power", "ram_power", "cpu_energy", "gpu_energy",
    "ram_energy", "energy_consumed", "country_name", "country_iso_code", "region",
    "cloud_provider", "cloud_region", "os", "python_version", "codecarbon_version", "cpu_count",
    "cpu_model", "gpu_count", "gpu_model", "longitude", "latitude", "ram_total_size",
    "tracking_mode", "on_cloud", "pue",
)
V3_COLUMNS = (
    *V2_COLUMNS[:14], "water_consumed", *V2_COLUMNS[14:30], "cpu_utilization_percent",
    "gpu_utilization_percent", "ram_utilization_percent", "ram_used_gb", "on_cloud", "pue", "wue",
)
FORMATS = {"codecarbon 2.x": V2_COLUMNS, "codecarbon 3.x": V3_COLUMNS}
REQUIRED_NUMBERS = ("duration", "emissions", "emissions_rate", "cpu_power", "gpu_power",
                    "ram_power", "cpu_energy", "gpu_energy", "ram_energy", "energy_consumed")
OPTIONAL_NUMBERS = ("cpu_count", "gpu_count", "longitude", "latitude", "ram_total_size", "pue",
                    "cpu_utilization_percent", "gpu_utilization_percent",
                    "ram_utilization_percent")
MAX_BYTES = 20 * 1024 * 1024
MAX_ROWS = 100_000


def bad(line: int | None, column: str | None, message: str) -> FieldError:
    where = f"line {line}" if line else "file"
    field_path = f"{where}.{column}" if column else where
    return FieldError(422, "invalid_csv", field_path,
                       f"{where}{', column ' + column if column else ''}: {message}")


@dataclass
class CsvRun:
    line: int
    run_id: uuid.UUID
    experiment_id: uuid.UUID
    timestamp: dt.datetime
    numbers: dict[str, float | None]
    text: dict[str, str]


@dataclass
class ParsedCsv:
    format: str
    rows: int
    runs: dict[uuid.UUID, CsvRun] = field(default_factory=dict)


def detect_format(header: list[str]) -> str:
    for name, columns in FORMATS.items():
        if tuple(header) == columns:
            return name
    # Name what is wrong against the closer of the two layouts.
    closest = min(FORMATS.values(), key=lambda cols: len(set(cols) ^ set(header)))
    missing = [c for c in closest if c not in header]
    extra = [c for c in header if c not in closest]
    if missing:
        raise bad(1, missing[0], f"missing column(s) {', '.join(missing)}; expected the header "
                  "of an emissions.csv written by codecarbon 2.x or 3.x")
    if extra:
        raise bad(1, extra[0], f"unexpected column(s) {', '.join(extra)}")
    raise bad(1, None, "columns are not in codecarbon's order")


def _number(raw: str, line: int, column: str, required: bool) -> float | None:
    if raw.strip() == "":
        if required:
            raise bad(line, column, "is empty; a number is required")
        return None
    try:
        value = float(raw)
    except ValueError:
        raise bad(line, column, f"{raw!r} is not a number") from None
    if not math.isfinite(value):
        raise bad(line, column, f"{raw!r} is not a finite number")
    if column not in ("longitude", "latitude") and value < 0:
        raise bad(line, column, f"{raw} is negative")
    return value


def _uuid(raw: str, line: int, column: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw.strip())
    except ValueError:
        raise bad(line, column, f"{raw!r} is not a UUID") from None


def _timestamp(raw: str, line: int) -> dt.datetime:
    try:
        ts = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        raise bad(line, "timestamp", f"{raw!r} is not an ISO 8601 timestamp") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)


def parse(data: bytes) -> ParsedCsv:
    if len(data) > MAX_BYTES:
        raise FieldError(413, "too_large", "file", f"the file is larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise bad(None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if not header:
        raise bad(None, None, "the file is empty")
    parsed = ParsedCsv(format=detect_format(header), rows=0)
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise bad(line, None, f"has {len(row)} fields, the header has {len(header)}")
        parsed.rows += 1
        if parsed.rows > MAX_ROWS:
            raise FieldError(413, "too_large", "file", f"more than {MAX_ROWS} rows")
        cells = dict(zip(header, row, strict=True))
        numbers = {c: _number(cells[c], line, c, True) for c in REQUIRED_NUMBERS}
        numbers |= {c: _number(cells[c], line, c, False) for c in OPTIONAL_NUMBERS if c in cells}
        item = CsvRun(
            line=line,
            run_id=_uuid(cells["run_id"], line, "run_id"),
            experiment_id=_uuid(cells["experiment_id"], line, "experiment_id"),
            timestamp=_timestamp(cells["timestamp"], line),
            numbers=numbers,
            text={c: cells[c].strip() for c in header if c not in numbers},
        )
        seen = parsed.runs.get(item.run_id)
        if seen is None or item.numbers["duration"] >= seen.numbers["duration"]:
            parsed.runs[item.run_id] = item
    if parsed.rows == 0:
        raise bad(None, None, "the file has a header but no rows")
    return parsed


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def store(team: Team, parsed: ParsedCsv) -> dict:
    """Store each run with one emissions row holding its totals. Re-uploading a file (or a
    newer version of it) replaces the uploaded runs; runs the client already sent are kept."""
    created = updated = skipped = 0
    with transaction.atomic():
        for item in parsed.runs.values():
            n, t = item.numbers, item.text
            existing = Run.objects.filter(team=team, codecarbon_run_id=item.run_id).first()
            if existing is not None and existing.source != Source.CSV:
                skipped += 1
                continue
            exp = runs.experiment_for(
                team, item.experiment_id, country_name=t["country_name"][:100],
                country_iso_code=t["country_iso_code"][:3], region=t["region"][:100],
                cloud_provider=t["cloud_provider"][:50], cloud_region=t["cloud_region"][:100],
                on_cloud=t["on_cloud"] == "Y",
            )
            fields = {
                "experiment": exp, "source": Source.CSV,
                "started_at": item.timestamp - dt.timedelta(seconds=n["duration"]),
                "project_name": t["project_name"][:255], "os": t["os"][:255],
                "python_version": t["python_version"][:32],
                "codecarbon_version": t["codecarbon_version"][:32],
                "cpu_count": _int(n["cpu_count"]), "cpu_model": t["cpu_model"][:255],
                "gpu_count": _int(n["gpu_count"]), "gpu_model": t["gpu_model"][:255],
                "longitude": n["longitude"], "latitude": n["latitude"],
                "country_name": t["country_name"][:100],
                "country_iso_code": t["country_iso_code"][:3], "region": t["region"][:100],
                "provider": t["cloud_provider"][:50], "cloud_region": t["cloud_region"][:100],
                "ram_total_size_gb": n["ram_total_size"], "tracking_mode": t["tracking_mode"][:16],
                "pue": n["pue"],
            }
            if existing is None:
                run = Run.objects.create(team=team, codecarbon_run_id=item.run_id, **fields)
                created += 1
            else:
                run = existing
                for k, v in fields.items():
                    setattr(run, k, v)
                run.save()
                run.emissions.all().delete()
                updated += 1
            runs.add_emission(run, item.timestamp, {
                "duration_s": n["duration"], "emissions_kg": n["emissions"],
                "emissions_rate_kg_per_s": n["emissions_rate"], "cpu_power_w": n["cpu_power"],
                "gpu_power_w": n["gpu_power"], "ram_power_w": n["ram_power"],
                "cpu_energy_kwh": n["cpu_energy"], "gpu_energy_kwh": n["gpu_energy"],
                "ram_energy_kwh": n["ram_energy"], "energy_consumed_kwh": n["energy_consumed"],
                "cpu_utilization_pct": n.get("cpu_utilization_percent"),
                "gpu_utilization_pct": n.get("gpu_utilization_percent"),
                "ram_utilization_pct": n.get("ram_utilization_percent"),
            })
    return {"format": parsed.format, "rows": parsed.rows, "runs_created": created,
            "runs_updated": updated, "runs_skipped": skipped}


def import_file(team: Team, data: bytes) -> dict:
    return store(team, parse(data))
