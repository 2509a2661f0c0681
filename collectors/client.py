"""A small client for applications that count their own inferences or training runs.

Standard library only, so it installs anywhere the application runs:

    from collectors.client import GreenOpsClient

    client = GreenOpsClient("https://greenops.example.com", token="gha_...")
    client.record_inferences("ranker", count=128, latencies_ms=[12.5, 9.1, ...], tokens=4096)

    with client.training_job("llm-finetune", name="run 42", host="gpu-node-1", gpus=[0, 1]):
        train()

Latencies are bucketed here onto the server's fixed layout (upper bounds 10^(k/20) ms,
k = -20..120: 0.1 ms to 1,000 s, 20 buckets per decade), so only counts travel and the server
merges them exactly. Each call has its own batch id: resending it after a timeout stores nothing
twice.
"""

from __future__ import annotations

import bisect
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

BOUNDS_MS: tuple[float, ...] = tuple(round(10 ** (k / 20), 6) for k in range(-20, 121))


class GreenOpsError(Exception):
    """The server rejected a request. `field` names the offending part of the payload."""

    def __init__(self, status: int, code: str, field: str | None, message: str) -> None:
        super().__init__(f"{status} {code}: {field or ''} {message}".strip())
        self.status, self.code, self.field, self.message = status, code, field, message


def bucket_counts(latencies_ms: Iterable[float]) -> list[int]:
    """Counts per layout bucket, plus the overflow bucket (above 1,000 s) at the end."""
    counts = [0] * (len(BOUNDS_MS) + 1)
    for v in latencies_ms:
        counts[bisect.bisect_left(BOUNDS_MS, v * (1 - 1e-9))] += 1
    return counts


class GreenOpsClient:
    def __init__(self, server: str, token: str, timeout_s: float = 10.0,
                 retries: int = 2) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.retries = retries

    def _post(self, path: str, doc: dict | None) -> dict:
        body = json.dumps(doc or {}).encode()
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(
                self.server + path, data=body, method="POST",
                headers={"Authorization": f"Bearer {self.token}",
                         "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read() or b"{}")
            except urllib.error.HTTPError as exc:
                try:
                    err = json.loads(exc.read() or b"{}")
                except ValueError:
                    err = {}
                if exc.code < 500:  # the request is wrong; retrying will not fix it
                    raise GreenOpsError(exc.code, err.get("error", "http_error"),
                                        err.get("field"), err.get("message", str(exc))) from None
                last = exc
            except (urllib.error.URLError, TimeoutError) as exc:
                last = exc
            if attempt < self.retries:
                time.sleep(min(2 ** attempt, 10))
        raise GreenOpsError(0, "unreachable", None, f"{self.server}: {last}")

    def record_inferences(self, workload: str, count: int, latencies_ms: Iterable[float] = (),
                          tokens: int | None = None, success: int | None = None,
                          failure: int | None = None, end: float | None = None,
                          start: float | None = None) -> dict:
        """Report `count` inferences of `workload` that finished just now (or at `end`), counted
        since `start` (when given, rates divide by the seconds actually counted)."""
        latencies = list(latencies_ms)
        window: dict = {"workload": workload, "end": time.time() if end is None else end,
                        "requests": count}
        if start is not None:
            window["start"] = start
        for key, value in (("tokens", tokens), ("success", success), ("failure", failure)):
            if value is not None:
                window[key] = value
        if latencies:
            window["latency"] = {"unit": "ms", "le": list(BOUNDS_MS),
                                 "counts": bucket_counts(latencies), "sum": sum(latencies)}
        # The batch id is fixed before the first attempt so that retries are no-ops.
        return self._post("/api/v1/inference",
                          {"batch_id": str(uuid.uuid4()), "windows": [window]})

    def start_training_job(self, workload: str, name: str, host: str | None = None,
                           gpus: list | None = None, external_id: str | None = None) -> dict:
        doc: dict = {"workload": workload, "name": name,
                     "external_id": external_id or str(uuid.uuid4())}
        if host is not None:
            doc["host"] = host
        if gpus is not None:
            doc["gpus"] = gpus
        return self._post("/api/v1/training-jobs", doc)

    def stop_training_job(self, job_id: int) -> dict:
        return self._post(f"/api/v1/training-jobs/{job_id}/stop", {})

    @contextmanager
    def training_job(self, workload: str, name: str, host: str | None = None,
                     gpus: list | None = None) -> Iterator[dict]:
        """Start a job on entry and stop it on exit (also when the body raises)."""
        job = self.start_training_job(workload, name, host=host, gpus=gpus)
        try:
            yield job
        finally:
            job.update(self.stop_training_job(job["id"]))
