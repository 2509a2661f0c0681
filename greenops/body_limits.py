"""How much JSON each API operation may make a worker decompress and parse.

A 284 KB gzip body that inflates to 62 MiB of JSON held a worker 15-18 s and 600 MB while it was
decompressed and parsed, on every endpoint that took up to the one 64 MiB limit. Each endpoint
now has a cap sized to its largest legitimate body, checked while the body is decompressed
(incrementally: never more than the cap is allocated) and before anything is parsed; past it the
answer is 413 `too_large` naming the limit.

The sizes, measured with the widest body each schema allows:
- samples, host samples, host energy: INGEST_MAX_SAMPLES samples of every column at full float
  precision are at most ~390 bytes a sample (22 columns), so 20,000 samples fit in 8 MiB; the
  agent merges at most 4,000 samples a POST (collectors/shipper.py MERGE_MAX_SAMPLES), a
  1.5 MiB body at worst. An 8-GPU host at 1 Hz sends 80 samples per 10 s batch.
- inference: the agent sends one window per scraped server per batch; 8 MiB holds the 1,000
  windows a request may carry at ~8 KB each (a latency and three timing histograms of 50
  buckets at full precision). A sender with wider windows sends fewer per request.
- enroll and inventory: a few KB; SMALL_BODY_MAX_BYTES, checked before decompression too, since
  enroll is unauthenticated.
- everything else (alert rules, workloads, training jobs, benchmark runs of at most 2,000
  repeats, report requests): API_BODY_MAX_BYTES, 1 MiB.
"""

from __future__ import annotations

from django.conf import settings

# Operation path (after /api/v1) -> the setting that caps its decompressed body.
_CAPS = {
    "/samples": "INGEST_MAX_DECOMPRESSED_BYTES",
    "/host-samples": "INGEST_MAX_DECOMPRESSED_BYTES",
    "/host-energy": "INGEST_MAX_DECOMPRESSED_BYTES",
    "/inference": "INFERENCE_MAX_DECOMPRESSED_BYTES",
    "/enroll": "SMALL_BODY_MAX_BYTES",
    "/inventory": "SMALL_BODY_MAX_BYTES",
}
PREFIX = "/api/v1"


def setting_for(path: str) -> str:
    """The name of the setting that caps a request path's decompressed JSON body."""
    op = path[len(PREFIX):] if path.startswith(PREFIX) else path
    return _CAPS.get(op.rstrip("/") or "/", "API_BODY_MAX_BYTES")


def decompressed_cap(path: str) -> int:
    """Bytes of JSON a request to `path` may decompress to (see the module's sizes)."""
    return int(getattr(settings, setting_for(path)))


def describe() -> str:
    """The limits as one sentence for the API docs (OpenAPI description, README)."""
    s = settings
    return (
        f"Request bodies may be gzip-encoded (Content-Encoding: gzip). Each operation caps "
        f"its body after decompression, checked before parsing, and answers 413 `too_large` "
        f"past it: /samples, /host-samples, /host-energy "
        f"{s.INGEST_MAX_DECOMPRESSED_BYTES:,} bytes and at most {s.INGEST_MAX_SAMPLES:,} samples; "
        f"/inference {s.INFERENCE_MAX_DECOMPRESSED_BYTES:,} bytes; /enroll and /inventory "
        f"{s.SMALL_BODY_MAX_BYTES:,} bytes, compressed or not; every other operation "
        f"{s.API_BODY_MAX_BYTES:,} bytes. A body over {s.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes as "
        f"sent is refused before it is read."
    )
