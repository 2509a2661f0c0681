"""Inference counts, latencies and timings scraped from inference servers' Prometheus ``/metrics``.

Every ``scrape_interval`` seconds each configured target is read and compared with its
previous good scrape; the differences become one *window* of the ``POST /api/v1/inference``
payload (greenops/kpis/inference.py) with its ``start`` (the previous good scrape) and ``end``:
counts are deltas over the window, never running totals, and a histogram is passed through
bucket by bucket (cumulative ``_bucket`` deltas in the server's own bounds), never reduced to
an average or a percentile here (the server computes percentiles as Prometheus'
``histogram_quantile`` does).

What a scrape is compared with -- the rules that keep a bad scrape from becoming a figure:

* A response shorter than its ``Content-Length``, one that does not end with a line feed (the
  text format ends every line with one), or one that does not parse is a *failed scrape*:
  nothing is sent and the last good scrape stays the base, so the next good one covers the
  whole span.
* A *restart* is recognised from ``process_start_time_seconds`` changing (vLLM exposes it), or,
  where the server does not expose it (Triton), from *every* counter and histogram series of
  the target that had counted something being lower than before. The window then counts the
  new values (what was counted since the restart, as Prometheus' ``increase()`` does) and
  starts at the new process start where known.
* Anything else that went down -- one counter of several, some buckets of a histogram, a
  histogram whose buckets are not cumulative -- is an *inconsistent scrape*: nothing is sent
  and the base is kept. After ``MAX_INCONSISTENT`` such scrapes in a row the target is taken
  as it now is (a new base, nothing sent for the span), so one odd series cannot stop a target
  for ever; that is logged.

A series that appears after the base (a model loaded later) counts from zero. The first scrape
of a target only sets the base: what the server counted before the agent started is not ours to
attribute to a window.

Kinds (``kind`` in the config):

* ``triton``: requests = ``nv_inference_count`` (inferences: a batch of n counts n),
  success/failure = ``nv_inference_request_success`` / ``nv_inference_request_failure``
  (requests). Request latency = ``nv_inference_request_duration_us`` (cumulative microseconds;
  a histogram where a build exposes ``_bucket`` series) over ``nv_inference_request_success``:
  a mean, sent as ``latency = {"unit": "us", "sum": ..., "count": ...}`` with no buckets.
  Beside it, as ``timings``: queue (``nv_inference_queue_duration_us``) and compute input /
  inference / output (``nv_inference_compute_{input,infer,output}_duration_us``), each over
  the same successful requests as Triton's documentation divides them (compute excludes cached
  requests: with the response cache on, those means are low by the cache-hit share), and the
  opt-in ``nv_inference_first_response_histogram_ms`` as *time to first response* (for a
  streaming model that is the first chunk, not the request). ``nv_energy_consumption`` (joules
  per GPU since Triton started) is summed over the server's GPUs into ``server_energy_j`` --
  all GPUs of the server, whichever model a target filters on.
* ``vllm``: requests = all ``vllm:request_success_total`` (every ``finished_reason``); failure
  = the ``abort`` and ``error`` reasons, success = the rest; tokens =
  ``vllm:generation_tokens_total``, prompt tokens = ``vllm:prompt_tokens_total``; latency =
  the ``vllm:e2e_request_latency_seconds`` histogram; timings: time to first token
  (``vllm:time_to_first_token_seconds``) and time per output token
  (``vllm:time_per_output_token_seconds``, ``vllm:inter_token_latency_seconds`` in newer
  releases).
* ``custom``: counter and histogram names from the config.
* ``dcgm``: NVIDIA dcgm-exporter's page -- GPU readings, not inference windows, so no
  ``workload``: collectors/dcgm.py reads it (profiling fields beside NVML, or every GPU figure
  where the agent has no NVML). At most one per host.

``labels = {model = "resnet50"}`` in a target keeps only the series with those label values
(a Triton or vLLM server often serves several models, each its own workload).
"""

from __future__ import annotations

import http.client
import logging
import math
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from collectors import __version__
from collectors import batch as wire
from collectors import prometheus as prom
from collectors.every import run_every

log = logging.getLogger(__name__)

INFERENCE_PATH = "/api/v1/inference"
KINDS = ("triton", "vllm", "custom", "dcgm")
UNITS = ("s", "ms", "us")
MAX_WINDOWS_PER_BATCH = 1000  # the server's limit per request
MAX_BODY_BYTES = 16 * 1024 * 1024  # a /metrics page beyond this is not an inference server's
MAX_INCONSISTENT = 3  # inconsistent scrapes in a row before the target is re-based
START_TIME = "process_start_time_seconds"

Fetch = Callable[[str, float], str]


class TargetError(ValueError):
    """A scrape target in the config is malformed (the CLI shows it as a config error)."""


class ScrapeError(ValueError):
    """A response that is not a whole, consistent scrape."""


@dataclass(frozen=True)
class Timing:
    """A timing beside the request latency: a histogram family, or a cumulative-duration
    counter divided by the counter of what it timed. Names as greenops.kpis.inference."""

    name: str
    families: tuple[str, ...]  # first exposed wins (metrics renamed across releases)
    unit: str
    per: str | None = None  # for a duration counter: the counter of what was timed


@dataclass(frozen=True)
class Recipe:
    """Which metric names mean what, for one kind of server."""

    requests: str
    success: str | None = None
    failure: str | None = None
    tokens: str | None = None
    prompt_tokens: str | None = None
    # Request-latency histogram family, (name, unit); series <name>_bucket...
    histograms: tuple[tuple[str, str], ...] = ()
    unit: str = "s"  # of the mean-only duration counter
    # Mean-only latency: a cumulative-duration counter and the counter of what it timed.
    duration_sum: str | None = None
    duration_count: str | None = None
    timings: tuple[Timing, ...] = ()
    energy_j: str | None = None  # a per-GPU energy counter in joules (not label-filtered)
    # vLLM: one counter whose finished_reason label tells success from failure.
    reason_label: str | None = None
    failure_reasons: tuple[str, ...] = ()


_TRITON_OK = "nv_inference_request_success"
TRITON = Recipe(
    requests="nv_inference_count",
    success=_TRITON_OK,
    failure="nv_inference_request_failure",
    # A build that exposes the request duration with buckets; Triton's default is a counter.
    histograms=(("nv_inference_request_duration_us", "us"),),
    unit="us",
    duration_sum="nv_inference_request_duration_us",
    duration_count=_TRITON_OK,
    timings=(
        # --metrics-config histogram_latencies=true (Triton 24.x): request to first response.
        Timing("first_response", ("nv_inference_first_response_histogram_ms",), "ms"),
        Timing("queue", ("nv_inference_queue_duration_us",), "us", per=_TRITON_OK),
        Timing("compute_input", ("nv_inference_compute_input_duration_us",), "us",
               per=_TRITON_OK),
        Timing("compute_infer", ("nv_inference_compute_infer_duration_us",), "us",
               per=_TRITON_OK),
        Timing("compute_output", ("nv_inference_compute_output_duration_us",), "us",
               per=_TRITON_OK),
    ),
    energy_j="nv_energy_consumption",
)
VLLM = Recipe(
    requests="vllm:request_success_total",
    tokens="vllm:generation_tokens_total",
    prompt_tokens="vllm:prompt_tokens_total",
    histograms=(("vllm:e2e_request_latency_seconds", "s"),),
    timings=(
        Timing("first_token", ("vllm:time_to_first_token_seconds",), "s"),
        Timing("per_output_token", ("vllm:time_per_output_token_seconds",
                                    "vllm:inter_token_latency_seconds"), "s"),
    ),
    reason_label="finished_reason",
    failure_reasons=("abort", "error"),
)


@dataclass(frozen=True)
class Target:
    url: str
    kind: str
    workload: str
    recipe: Recipe | None  # None for kind = "dcgm" (GPU readings, not windows)
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.kind} {self.url} ({self.workload})"


_TARGET_KEYS = {"url", "kind", "workload", "labels", "requests", "success", "failure", "tokens",
                "latency_histogram", "latency_unit"}


def parse_target(doc: Any, where: str) -> Target:
    """One ``[[scrape]]`` table of the agent's TOML config."""
    if not isinstance(doc, Mapping):
        raise TargetError(f"{where} must be a table")
    unknown = sorted(set(doc) - _TARGET_KEYS)
    if unknown:
        raise TargetError(f"{where}: unknown key(s) {', '.join(unknown)}")
    url, kind, workload = doc.get("url"), doc.get("kind"), doc.get("workload")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise TargetError(f"{where}.url must be an http:// or https:// URL, got {url!r}")
    if kind not in KINDS:
        raise TargetError(f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    labels = doc.get("labels", {})
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise TargetError(f"{where}.labels must be a table of strings, e.g. {{model = \"x\"}}")
    if kind == "dcgm":
        extra = sorted(set(doc) - {"url", "kind", "labels"})
        if extra:
            raise TargetError(f"{where}: a dcgm target takes url and labels only (it reads "
                              f"GPUs, not a workload), not {', '.join(extra)}")
        return Target(url, kind, "", None, tuple(sorted(labels.items())))
    if not isinstance(workload, str) or not workload:
        raise TargetError(f"{where}.workload must be the workload's slug")
    names = {k: doc.get(k) for k in ("requests", "success", "failure", "tokens",
                                     "latency_histogram")}
    for key, value in names.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise TargetError(f"{where}.{key} must be a metric name")
    unit = doc.get("latency_unit", "s")
    if unit not in UNITS:
        raise TargetError(f"{where}.latency_unit must be one of {', '.join(UNITS)}")
    if kind == "custom":
        if not names["requests"]:
            raise TargetError(f"{where}: a custom target needs requests = \"<counter name>\"")
        recipe = Recipe(
            requests=names["requests"],
            success=names["success"],
            failure=names["failure"],
            tokens=names["tokens"],
            histograms=((names["latency_histogram"], unit),) if names["latency_histogram"] else (),
        )
    else:
        if any(names.values()) or "latency_unit" in doc:
            raise TargetError(f"{where}: metric names are only configurable for kind = custom")
        recipe = TRITON if kind == "triton" else VLLM
    return Target(url, kind, workload, recipe, tuple(sorted(labels.items())))




# --- deltas ----------------------------------------------------------------------------------


def counter_delta(prev: Mapping[prom.Labels, float], cur: Mapping[prom.Labels, float]) -> float:
    """Sum over series of the increase since ``prev``; a series new since ``prev`` counts from
    zero. Callers have already refused scrapes in which a series fell (see ``compare``); after
    a restart they pass an empty ``prev``."""
    total = 0.0
    for labels, value in cur.items():
        if math.isnan(value):
            continue
        before = prev.get(labels)
        if before is None or math.isnan(before) or value < before:
            total += value  # new series (or, defensively, one that restarted on its own)
        else:
            total += value - before
    return total


@dataclass(frozen=True)
class Histogram:
    """One histogram series: finite bounds ascending, cumulative counts per bound plus +Inf."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]  # len(bounds) + 1; the last is the +Inf bucket (= count)
    sum: float


def histograms(expo: prom.Exposition, family: str, keep: Callable[[prom.Labels], bool]
               ) -> dict[prom.Labels, Histogram]:
    """Every series of a histogram family, keyed by its labels without ``le``. Buckets that are
    not cumulative (a count lower than the bucket below it) make the scrape unreadable."""
    buckets: dict[prom.Labels, dict[float, float]] = {}
    for labels, value in expo.series(family + "_bucket").items():
        le = prom.label(labels, "le")
        if le is None:
            raise prom.ParseError(f"{family}_bucket series without an le label")
        key = prom.without(labels, "le")
        if keep(key):
            buckets.setdefault(key, {})[prom.le_value(le)] = value
    sums = expo.series(family + "_sum")
    counts = expo.series(family + "_count")
    out: dict[prom.Labels, Histogram] = {}
    for key, by_le in buckets.items():
        finite = sorted(b for b in by_le if math.isfinite(b))
        inf = by_le.get(math.inf, counts.get(key))
        if inf is None:
            raise prom.ParseError(f"{family}: no +Inf bucket and no _count for {dict(key)}")
        cumulative = tuple(by_le[b] for b in finite) + (inf,)
        if any(b < a for a, b in zip(cumulative, cumulative[1:], strict=False)):
            raise prom.ParseError(f"{family}: bucket counts of {dict(key)} are not cumulative")
        out[key] = Histogram(tuple(finite), cumulative, sums.get(key, 0.0))
    return out


def histogram_delta(prev: Mapping[prom.Labels, Histogram], cur: Mapping[prom.Labels, Histogram]
                    ) -> Histogram | None:
    """Bucket-wise increase summed over series; None when nothing is known or layouts differ."""
    result: Histogram | None = None
    for key, h in cur.items():
        before = prev.get(key)
        if before is None or before.bounds != h.bounds:
            delta = h  # new series or a changed layout: everything is new
        else:
            delta = Histogram(
                h.bounds,
                tuple(max(c - b, 0.0) for c, b in zip(h.cumulative, before.cumulative,
                                                       strict=True)),
                max(h.sum - before.sum, 0.0),
            )
        if result is None:
            result = delta
        elif result.bounds != delta.bounds:
            # Two series with different bounds cannot be added bucket by bucket without
            # inventing where inside a bucket the observations fell.
            log.warning("histogram series with different bucket bounds; latency not sent")
            return None
        else:
            result = Histogram(
                result.bounds,
                tuple(a + b for a, b in zip(result.cumulative, delta.cumulative, strict=True)),
                result.sum + delta.sum,
            )
    return result


# --- one target ------------------------------------------------------------------------------


@dataclass
class Snapshot:
    at: float = 0.0  # when it was taken (the agent's clock): the next window's start
    start_time: float | None = None  # process_start_time_seconds, where exposed
    counters: dict[str, dict[prom.Labels, float]] = field(default_factory=dict)
    # Histogram families by name (request latency and timings), each {labels: Histogram}.
    histograms: dict[str, dict[prom.Labels, Histogram]] = field(default_factory=dict)
    family: str | None = None  # which request-latency histogram family, and its unit
    unit: str | None = None

    @property
    def histogram(self) -> dict[prom.Labels, Histogram] | None:
        return self.histograms.get(self.family) if self.family else None


OK, RESTART, INCONSISTENT = "ok", "restart", "inconsistent"


def compare(prev: Snapshot, cur: Snapshot) -> tuple[str, str]:
    """How ``cur`` follows ``prev``: ok, restart or inconsistent, and why.

    A restart: the process start time moved, or (where none is exposed) every counter that
    had counted something -- histogram totals included -- went down. Otherwise nothing may go
    down: one counter of several, or any bucket of a histogram, going down is a bad scrape."""
    if prev.start_time is not None and cur.start_time is not None:
        if cur.start_time != prev.start_time:
            return RESTART, f"process start time moved to {cur.start_time:.0f}"
        restart_possible = False  # the same process: nothing may go down
    else:
        restart_possible = True
    fell: list[str] = []
    held = 0  # counters that had counted something and did not go down
    for name, series in cur.counters.items():
        before = prev.counters.get(name, {})
        for labels, value in series.items():
            old = before.get(labels)
            if old is None or math.isnan(old) or math.isnan(value) or old <= 0:
                continue
            if value < old:
                fell.append(f"{name}{dict(labels)}")
            else:
                held += 1
    bucket_fell = ""
    for family, series in cur.histograms.items():
        before_h = prev.histograms.get(family, {})
        for labels, h in series.items():
            old_h = before_h.get(labels)
            if old_h is None or old_h.bounds != h.bounds or old_h.cumulative[-1] <= 0:
                continue
            if h.cumulative[-1] < old_h.cumulative[-1]:
                fell.append(f"{family}{dict(labels)}")
            else:
                held += 1
            if not bucket_fell and any(
                    c < b for c, b in zip(h.cumulative, old_h.cumulative, strict=True)):
                bucket_fell = f"buckets of {family}{dict(labels)} went down"
    if restart_possible and fell and not held:
        return RESTART, "every counter went down"
    if fell:
        return INCONSISTENT, f"{fell[0]} went down while other series did not"
    if bucket_fell:
        return INCONSISTENT, bucket_fell  # some buckets fell: no restart does that
    return OK, ""


def _count(value: float) -> int:
    # Prometheus exposes counters as floats; inference counts are whole numbers.
    return int(round(value))


class TargetScraper:
    """Keeps one target's last good scrape and turns the next one into a window."""

    def __init__(self, target: Target, fetch: Fetch | None = None, timeout_s: float = 5.0) -> None:
        self.target = target
        self.fetch = fetch or http_fetch
        self.timeout_s = timeout_s
        self.previous: Snapshot | None = None
        self.inconsistent = 0  # inconsistent scrapes in a row
        self._warned_missing = False

    def _keep(self, labels: prom.Labels) -> bool:
        return all(prom.label(labels, k) == v for k, v in self.target.labels)

    def snapshot(self, expo: prom.Exposition, at: float = 0.0) -> Snapshot:
        r = self.target.recipe
        names = {r.requests, r.success, r.failure, r.tokens, r.prompt_tokens, r.duration_sum,
                 r.duration_count, *(t.families[0] for t in r.timings if t.per),
                 *(t.per for t in r.timings)}
        snap = Snapshot(at=at)
        for name in names - {None}:
            assert name is not None
            snap.counters[name] = {k: v for k, v in expo.series(name).items() if self._keep(k)}
        if r.energy_j and expo.has(r.energy_j):
            snap.counters[r.energy_j] = dict(expo.series(r.energy_j))  # per GPU, not per model
        start = expo.series(START_TIME).get(())
        snap.start_time = start if start is not None and math.isfinite(start) else None
        for family, unit in r.histograms:
            if expo.has(family + "_bucket"):
                snap.histograms[family] = histograms(expo, family, self._keep)
                snap.family, snap.unit = family, unit
                break
        for t in r.timings:
            if t.per:
                continue
            for family in t.families:
                if expo.has(family + "_bucket"):
                    snap.histograms[family] = histograms(expo, family, self._keep)
                    break
        if not expo.has(r.requests) and not self._warned_missing:
            self._warned_missing = True
            log.warning("%s exposes no %s; is kind = %r right?", self.target.url, r.requests,
                        self.target.kind)
        return snap

    def scrape(self, end: float) -> dict | None:
        """Read the target once. Returns its window, or None (first scrape, a failed or
        inconsistent scrape)."""
        try:
            snap = self.snapshot(prom.parse(self.fetch(self.target.url, self.timeout_s)), end)
        except (OSError, http.client.HTTPException, ValueError) as exc:  # ParseError included
            log.warning("scrape of %s failed (%s); the next one covers this span",
                        self.target.name, exc)
            return None
        prev = self.previous
        if prev is None:
            self.previous = snap
            return None
        verdict, why = compare(prev, snap)
        if verdict == INCONSISTENT:
            self.inconsistent += 1
            if self.inconsistent < MAX_INCONSISTENT:
                log.warning("scrape of %s is inconsistent (%s); nothing sent, the last good "
                            "scrape stays the base", self.target.name, why)
                return None
            log.warning("scrape of %s inconsistent %d times in a row (%s); taking it as the "
                        "new base, nothing sent for %.0f s", self.target.name,
                        self.inconsistent, why, end - prev.at)
            self.previous, self.inconsistent = snap, 0
            return None
        self.previous, self.inconsistent = snap, 0
        if verdict == RESTART:
            log.info("%s restarted (%s); counting from zero", self.target.name, why)
            start = prev.at
            if snap.start_time is not None and prev.at < snap.start_time < end:
                start = snap.start_time
            base = Snapshot(at=start, family=snap.family, unit=snap.unit)
            return self.window(base, snap, end)
        return self.window(prev, snap, end)

    def window(self, prev: Snapshot, cur: Snapshot, end: float) -> dict:
        r = self.target.recipe

        def delta(name: str | None) -> float | None:
            if name is None:
                return None
            return counter_delta(prev.counters.get(name, {}), cur.counters.get(name, {}))

        win: dict[str, Any] = {"workload": self.target.workload, "end": end}
        if prev.at and prev.at < end:
            win["start"] = prev.at
        if r.reason_label:
            by_reason: dict[str, float] = {}
            before = prev.counters.get(r.requests, {})
            for labels, value in cur.counters.get(r.requests, {}).items():
                reason = prom.label(labels, r.reason_label) or ""
                by_reason[reason] = by_reason.get(reason, 0.0) + counter_delta(
                    {labels: before[labels]} if labels in before else {}, {labels: value}
                )
            failed = sum(v for k, v in by_reason.items() if k in r.failure_reasons)
            total = sum(by_reason.values())
            win["requests"] = _count(total)
            win["success"] = _count(total - failed)
            win["failure"] = _count(failed)
        else:
            win["requests"] = _count(delta(r.requests) or 0.0)
            for key, name in (("success", r.success), ("failure", r.failure)):
                if name is not None:
                    win[key] = _count(delta(name) or 0.0)
        if r.tokens is not None:
            win["tokens"] = _count(delta(r.tokens) or 0.0)
        if r.prompt_tokens is not None and cur.counters.get(r.prompt_tokens):
            win["prompt_tokens"] = _count(delta(r.prompt_tokens) or 0.0)
        if r.energy_j and cur.counters.get(r.energy_j):
            win["server_energy_j"] = delta(r.energy_j)
        latency = self.latency(prev, cur, delta)
        if latency is not None:
            win["latency"] = latency
        timings = {}
        for t in r.timings:
            value = self.timing(t, prev, cur, delta)
            if value is not None:
                timings[t.name] = value
        if timings:
            win["timings"] = timings
        return win

    @staticmethod
    def _histogram_doc(prev: Snapshot, cur: Snapshot, family: str, unit: str) -> dict | None:
        h = histogram_delta(prev.histograms.get(family, {}), cur.histograms[family])
        if h is None or h.cumulative[-1] <= 0:
            return None
        return {"unit": unit, "le": list(h.bounds), "counts": [_count(c) for c in h.cumulative],
                "cumulative": True, "sum": h.sum}

    def latency(self, prev: Snapshot, cur: Snapshot, delta: Callable[[str | None], float | None]
                ) -> dict | None:
        r = self.target.recipe
        if cur.family is not None:
            if prev.family not in (None, cur.family):
                return None  # the server switched histogram families: no common baseline
            return self._histogram_doc(prev, cur, cur.family, cur.unit or "s")
        if r.duration_sum and r.duration_count and cur.counters.get(r.duration_sum):
            # Triton's default: a cumulative duration counter. Only a mean can come of it, so
            # no buckets are sent and none are made up.
            n = _count(delta(r.duration_count) or 0.0)
            if n <= 0:
                return None
            return {"unit": r.unit, "sum": delta(r.duration_sum), "count": n}
        return None

    def timing(self, t: Timing, prev: Snapshot, cur: Snapshot,
               delta: Callable[[str | None], float | None]) -> dict | None:
        if t.per is None:
            family = next((f for f in t.families if f in cur.histograms), None)
            return self._histogram_doc(prev, cur, family, t.unit) if family else None
        if not cur.counters.get(t.families[0]):
            return None
        n = _count(delta(t.per) or 0.0)
        if n <= 0:
            return None
        return {"unit": t.unit, "sum": delta(t.families[0]), "count": n}


def http_fetch(url: str, timeout_s: float) -> str:
    """GET a /metrics page whole. A body shorter than its Content-Length (the connection
    dropped mid-page) or not ending in a line feed is refused: a page cut inside a value
    still parses, as a smaller number."""
    req = urllib.request.Request(
        url, headers={"Accept": "text/plain", "User-Agent": f"greenops-agent/{__version__}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read(MAX_BODY_BYTES + 1)
            expected = resp.headers.get("Content-Length")
    except urllib.error.URLError as exc:
        raise OSError(str(getattr(exc, "reason", exc))) from exc
    if len(body) > MAX_BODY_BYTES:
        raise OSError(f"metrics page larger than {MAX_BODY_BYTES} bytes")
    if expected is not None and expected.strip().isdigit() and len(body) != int(expected):
        raise ScrapeError(f"short response: {len(body)} of {int(expected)} bytes "
                          "(Content-Length)")
    if body and not body.endswith(b"\n"):
        raise ScrapeError("response does not end with a line feed: cut short")
    return body.decode("utf-8", "replace")


# --- the agent side: a thread that scrapes, and batches that go through the spool -------------


def build_inference_batch(windows: list[dict], batch_id: str | None = None) -> dict:
    """The POST /api/v1/inference document; ``sent_at`` is restamped by the shipper."""
    return {"batch_id": batch_id or str(uuid.uuid4()), "sent_at": time.time(),
            "windows": windows}


class ScrapeChannel:
    """Scrapes every target every ``interval_s`` on its own thread (a slow server must not
    delay GPU sampling); the agent's loop calls :meth:`seal` to spool the windows."""

    name = "inference scraping"

    def __init__(
        self,
        targets: list[Target],
        interval_s: float = 15.0,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("scrape interval must be positive")
        self.interval_s = interval_s
        self.clock = clock
        timeout_s = min(10.0, max(0.5, interval_s / 2))
        # dcgm targets are GPU sources (collectors/dcgm.py), not inference windows.
        self.scrapers = [TargetScraper(t, fetch, timeout_s) for t in targets
                         if t.recipe is not None]
        self.windows: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scrape_all(self) -> int:
        """One round over every target; returns the number of windows it produced."""
        produced = 0
        seen: set[tuple[str, float]] = set()
        for scraper in self.scrapers:
            end = self.clock()
            while (scraper.target.workload, end) in seen:  # the server wants unique ends
                end = math.nextafter(end, math.inf)
            win = scraper.scrape(end)
            if win is not None:
                seen.add((scraper.target.workload, end))
                with self._lock:
                    self.windows.append(win)
                produced += 1
        return produced

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="greenops-scrape", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        run_every(self.interval_s, self._stop, self.scrape_all, "scrape round")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def seal(self, spool: Any) -> int:
        """Spool the windows gathered so far as inference batches; returns how many batches."""
        with self._lock:
            windows, self.windows = self.windows, []
        batches = 0
        for i in range(0, len(windows), MAX_WINDOWS_PER_BATCH):
            chunk = windows[i : i + MAX_WINDOWS_PER_BATCH]
            doc = build_inference_batch(chunk)
            spool.put(doc["batch_id"], wire.encode(doc), len(chunk), path=INFERENCE_PATH)
            batches += 1
        return batches
