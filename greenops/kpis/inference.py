"""POST /api/v1/inference: validating and storing inference counts and latency histograms.

Payload (JSON, optionally gzip):

    {"batch_id": "<uuid, fixed by the sender; a resend is a no-op>",
     "windows": [{
        "workload": "<workload slug of the token's team>",
        "start": <optional Unix seconds: where the counting window began (the previous scrape)>,
        "end": <Unix seconds: the end of the counting window>,
        "requests": <int: inferences counted in the window (a delta, not a running total)>,
        "success": <int, optional>, "failure": <int, optional>,
        "tokens": <int, optional: generated (output) tokens in the window>,
        "prompt_tokens": <int, optional: prompt (input) tokens in the window>,
        "server_energy_j": <number, optional: GPU energy the inference server itself counted
                            in the window (Triton's nv_energy_consumption), a cross-check>,
        "latency": <optional TIMING: whole-request latency>,
        "timings": {<optional; name: TIMING> for the names in TIMING_NAMES: time to first
                    token / response, time per output token, queue and compute phases}}]}

    TIMING = {                              # a histogram, or a mean (sum + count), or both
        "unit": "ms" | "s" | "us",           # default ms (vLLM histograms are in s)
        "le": [<finite upper bounds, strictly increasing>],
        "counts": [<len(le) + 1 ints; the last is the overflow bucket, le="+Inf">],
        "cumulative": <bool, default false; true for Prometheus `_bucket` deltas, where each
                       count includes the buckets below it and the last is the total>,
        "sum": <optional: sum of the latencies in the window, in `unit`>,
        "count": <optional int: how many latencies `sum` adds up; with a histogram it must
                  equal the histogram's total. Without le/counts, sum + count alone give a mean
                  but no percentiles -- Triton's default *_duration_us counters are such sums>}

A window is attributed to the hour (and day) that contains its `end`. Histograms keep their
bounds (converted to ms), so percentiles are Prometheus' histogram_quantile over them
(greenops.kpis.histogram).

One bad window loses only itself: each window is validated on its own; the valid ones are stored
and the answer names every refused one (`"refused": [{"index", "field", "message"}]`, the field
a path such as `windows[2].latency.counts[5]`). A payload whose every window is refused, or
whose envelope (batch_id, windows) is malformed, is answered 422 and stores nothing. Numbers
must be finite everywhere (NaN, Infinity, "Infinity" and 1e309 are refused with their field).
"""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid

from django.conf import settings
from django.db import IntegrityError, transaction

from greenops.errors import FieldError, invalid
from greenops.kpis import histogram
from greenops.kpis.models import InferenceBatch, InferenceWindow
from greenops.teams.models import Team
from greenops.telemetry.wire import json_int
from greenops.workloads.models import Workload

MAX_WINDOWS = 1000
MAX_BOUNDS = 200
MAX_COUNT = 10**15
MAX_ENERGY_J = 1e15
UNIT_TO_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001}
# Timings a window may carry beside the whole-request latency. Names say what was timed; the
# agent maps each server's metric onto one (collectors/scrape.py).
TIMING_NAMES = {
    "first_token": "time to first token",  # vLLM vllm:time_to_first_token_seconds
    "per_output_token": "time per output token",  # vLLM vllm:time_per_output_token_seconds
    "first_response": "time to first response",  # Triton nv_inference_first_response_histogram_ms
    "queue": "queue time",  # Triton nv_inference_queue_duration_us
    "compute_input": "compute: input",  # Triton nv_inference_compute_input_duration_us
    "compute_infer": "compute: inference",  # Triton nv_inference_compute_infer_duration_us
    "compute_output": "compute: output",  # Triton nv_inference_compute_output_duration_us
}
WINDOW_KEYS = {"workload", "start", "end", "requests", "success", "failure", "tokens",
               "prompt_tokens", "server_energy_j", "latency", "timings"}
LATENCY_KEYS = {"unit", "le", "counts", "cumulative", "sum", "count"}


def _count(value, field: str, *, optional: bool) -> int | None:
    if value is None and optional:
        return None
    value = json_int(value)
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise invalid(field, f"must be a non-negative integer{' or null' if optional else ''}")
    return value


def _number(value, field: str) -> float:
    # type() rather than isinstance: a JSON true is not 1. isfinite refuses the NaN/Infinity
    # that Python's json module (and 1e309) would turn into floats.
    if type(value) not in (int, float) or not math.isfinite(value):
        raise invalid(field, "must be a finite number")
    return float(value)


def _latency_sum_ms(doc, field: str, scale: float) -> float | None:
    if doc.get("sum") is None:
        return None
    sum_ms = _number(doc["sum"], f"{field}.sum") * scale
    if sum_ms < 0:
        raise invalid(f"{field}.sum", "must not be negative")
    return sum_ms


def parse_latency(doc, field: str) -> tuple[dict, float | None, int]:
    """A latency histogram in any bucket layout, or a mean given as sum + count ->
    (histogram in its own bounds, in ms, as JSON; sum in ms; how many latencies the sum covers)."""
    if not isinstance(doc, dict):
        raise invalid(field, "must be an object with le and counts, or sum and count")
    unknown = set(doc) - LATENCY_KEYS
    if unknown:
        raise invalid(f"{field}.{sorted(unknown)[0]}", "is not a known field")
    unit = doc.get("unit", "ms")
    if unit not in UNIT_TO_MS:
        raise invalid(f"{field}.unit", "must be one of ms, s, us")
    scale = UNIT_TO_MS[unit]
    count = _count(doc.get("count"), f"{field}.count", optional=True)
    le, counts = doc.get("le"), doc.get("counts")
    if le is None and counts is None and "cumulative" not in doc:
        # Mean only: no buckets, so no percentiles from this window.
        if count is None:
            raise invalid(f"{field}.count", "is required when le and counts are absent")
        sum_ms = _latency_sum_ms(doc, field, scale)
        if sum_ms is None:
            raise invalid(f"{field}.sum", "is required when le and counts are absent")
        return {}, sum_ms, count
    if not isinstance(le, list) or not 1 <= len(le) <= MAX_BOUNDS:
        raise invalid(f"{field}.le", f"must be an array of 1 to {MAX_BOUNDS} upper bounds")
    bounds: list[float] = []
    for i, v in enumerate(le):
        b = _number(v, f"{field}.le[{i}]")
        if b <= 0 or (bounds and b <= bounds[-1]):
            raise invalid(f"{field}.le[{i}]", "bounds must be positive and strictly increasing")
        bounds.append(b)
    if not isinstance(counts, list) or len(counts) != len(bounds) + 1:
        raise invalid(f"{field}.counts",
                      f"must be an array of {len(bounds) + 1} counts (one per bound plus the "
                      "overflow bucket)")
    clean = [_count(c, f"{field}.counts[{i}]", optional=False) for i, c in enumerate(counts)]
    cumulative = doc.get("cumulative", False)
    if type(cumulative) is not bool:
        raise invalid(f"{field}.cumulative", "must be true or false")
    if cumulative:
        for i in range(1, len(clean)):
            if clean[i] < clean[i - 1]:
                raise invalid(f"{field}.counts[{i}]",
                              "cumulative counts must not decrease from one bound to the next")
    h = histogram.from_buckets([b * scale for b in bounds], clean, cumulative=cumulative)
    n = int(h.total)
    if count is not None and count != n:
        raise invalid(f"{field}.count", f"is {count} but the histogram holds {n}")
    sum_ms = _latency_sum_ms(doc, field, scale)
    # Without a sum the window adds nothing to the mean (but its buckets still count).
    return histogram.to_json(h), sum_ms, (n if sum_ms is not None else 0)


def parse_timings(doc, field: str) -> dict:
    """``timings`` -> {name: {"sum_ms", "n", "hist"}}, the stored form (greenops.kpis.timings)."""
    if not isinstance(doc, dict):
        raise invalid(field, "must be an object of timings by name")
    out = {}
    for name in sorted(doc):
        if name not in TIMING_NAMES:
            raise invalid(f"{field}.{name}", "is not a known timing; one of "
                          + ", ".join(TIMING_NAMES))
        hist, sum_ms, n = parse_latency(doc[name], f"{field}.{name}")
        out[name] = {"sum_ms": sum_ms or 0.0, "n": n, "hist": hist}
    return out


def _envelope(doc) -> tuple[uuid.UUID, list]:
    if not isinstance(doc, dict):
        raise invalid("", "the payload must be a JSON object")
    unknown = set(doc) - {"batch_id", "windows", "sent_at"}
    if unknown:
        raise invalid(sorted(unknown)[0], "is not a known field")
    if not isinstance(doc.get("batch_id"), str):
        raise invalid("batch_id", "must be a UUID string")
    try:
        batch_id = uuid.UUID(doc["batch_id"])
    except ValueError:
        raise invalid("batch_id", "must be a UUID string") from None
    windows = doc.get("windows")
    if not isinstance(windows, list) or not windows:
        raise invalid("windows", "must be a non-empty array")
    if len(windows) > MAX_WINDOWS:
        raise FieldError(413, "too_many_windows", "windows",
                          f"{len(windows)} windows; a request may hold at most {MAX_WINDOWS}")
    return batch_id, windows


def parse_window(w, path: str, workloads: dict[str, Workload], seen: set, *, now_s: float
                 ) -> InferenceWindow:
    """One window -> an unsaved row. Raises FieldError naming the field."""
    if not isinstance(w, dict):
        raise invalid(path, "must be an object")
    unknown = set(w) - WINDOW_KEYS
    if unknown:
        raise invalid(f"{path}.{sorted(unknown)[0]}", "is not a known field")
    slug = w.get("workload")
    if not isinstance(slug, str) or slug not in workloads:
        raise invalid(f"{path}.workload",
                      "must be the slug of a workload of this team; register it first")
    end_s = _number(w.get("end"), f"{path}.end")
    max_future_s, max_age_s = settings.INGEST_MAX_FUTURE_S, settings.INGEST_MAX_AGE_S
    if end_s > now_s + max_future_s:
        raise invalid(f"{path}.end", f"is {end_s - now_s:.0f} s in the future; check the "
                      "sender's clock")
    if end_s < now_s - max_age_s:
        raise invalid(f"{path}.end", f"is older than {max_age_s / 86400:g} days")
    start_s = None
    if w.get("start") is not None:
        start_s = _number(w["start"], f"{path}.start")
        if start_s >= end_s:
            raise invalid(f"{path}.start", "must be before end")
    if (slug, end_s) in seen:
        raise invalid(f"{path}.end", "two windows of the same workload share an end time")
    requests = _count(w.get("requests"), f"{path}.requests", optional=False)
    success = _count(w.get("success"), f"{path}.success", optional=True)
    failure = _count(w.get("failure"), f"{path}.failure", optional=True)
    tokens = _count(w.get("tokens"), f"{path}.tokens", optional=True)
    prompt_tokens = _count(w.get("prompt_tokens"), f"{path}.prompt_tokens", optional=True)
    server_energy_j = None
    if w.get("server_energy_j") is not None:
        server_energy_j = _number(w["server_energy_j"], f"{path}.server_energy_j")
        if not 0 <= server_energy_j <= MAX_ENERGY_J:
            raise invalid(f"{path}.server_energy_j", "must be between 0 and 1e15 J")
    buckets, sum_ms, latency_n = ({}, None, 0)
    if w.get("latency") is not None:
        buckets, sum_ms, latency_n = parse_latency(w["latency"], f"{path}.latency")
    timings = parse_timings(w["timings"], f"{path}.timings") if w.get("timings") else {}
    seen.add((slug, end_s))
    return InferenceWindow(
        workload=workloads[slug], end=dt.datetime.fromtimestamp(end_s, dt.UTC),
        start=dt.datetime.fromtimestamp(start_s, dt.UTC) if start_s is not None else None,
        requests=requests, success=success, failure=failure, tokens=tokens,
        prompt_tokens=prompt_tokens, server_energy_j=server_energy_j,
        latency_sum_ms=sum_ms, latency_n=latency_n, latency_buckets=buckets, timings=timings,
    )


def parse_windows(doc, team: Team, *, now_s: float
                  ) -> tuple[uuid.UUID, list[InferenceWindow], list[dict]]:
    """Validate a payload -> (batch id, unsaved rows of the valid windows, refused windows).

    Raises FieldError when the envelope is malformed or no window is valid (naming the first
    refused window's field)."""
    batch_id, windows = _envelope(doc)
    slugs = {w.get("workload") for w in windows if isinstance(w, dict)}
    workloads = {
        w.slug: w for w in Workload.objects.filter(
            # PostgreSQL text cannot hold NUL: such a slug matches no workload (a 422 below),
            # and must not reach the query, where it is a DataError (500; found by schemathesis).
            team=team, slug__in=[s for s in slugs if isinstance(s, str) and "\x00" not in s])
    }
    rows: list[InferenceWindow] = []
    refused: list[dict] = []
    first_error: FieldError | None = None
    seen: set = set()
    for i, w in enumerate(windows):
        try:
            rows.append(parse_window(w, f"windows[{i}]", workloads, seen, now_s=now_s))
        except FieldError as exc:
            first_error = first_error or exc
            refused.append({"index": i, "field": exc.field, "message": exc.message})
    if not rows:
        assert first_error is not None
        raise first_error
    return batch_id, rows, refused


def accept(team: Team, doc, sender: str = "", now_s: float | None = None) -> dict:
    """Validate and store the valid windows of a payload exactly once; name the refused ones."""
    batch_id, rows, refused = parse_windows(doc, team,
                                            now_s=time.time() if now_s is None else now_s)
    answer = {"batch_id": str(batch_id), "windows": len(rows), "refused": refused}
    existing = InferenceBatch.objects.filter(id=batch_id).only("team_id").first()
    if existing is not None:
        if existing.team_id != team.id:
            raise FieldError(409, "conflict", "batch_id", "this batch id belongs to another team")
        return {**answer, "status": "duplicate"}
    try:
        with transaction.atomic():
            batch = InferenceBatch.objects.create(id=batch_id, team=team, sender=sender[:100],
                                                  windows=len(rows))
            for row in rows:
                row.batch = batch
            InferenceWindow.objects.bulk_create(rows)
    except IntegrityError:  # the same batch raced in twice
        return {**answer, "status": "duplicate"}
    return {**answer, "status": "stored"}
