"""The WSGI application bench/ingest_layers serves: greenops.wsgi with POST /api/v1/samples cut
short at the layer named by BENCH_LAYER (bench/ingest_layers says what each one runs)."""

from __future__ import annotations

import os

LAYER = os.environ.get("BENCH_LAYER", "full")

if LAYER == "granian":
    def application(environ, start_response):
        environ["wsgi.input"].read()
        body = b'{"batch_id":"-","samples":80,"status":"queued"}'
        start_response("202 Accepted", [("Content-Type", "application/json"),
                                        ("Content-Length", str(len(body)))])
        return [body]
else:
    from greenops.wsgi import application  # noqa: F401, I001 (first: it sets Django up)

    from greenops.telemetry import ingest, wire

    def _accepted(batch_id: str, n: int) -> dict:
        return {"batch_id": batch_id, "samples": n, "status": "queued"}

    def _validate_only(auth, body, content_encoding):
        doc = ingest.parse_body(body, content_encoding)
        batch = ingest._check_intake(doc)
        wire.parse_spool_report(doc)
        return _accepted(str(batch.batch_id), batch.n)

    if LAYER == "route":
        ingest.samples_auth = lambda header: ingest.SamplesAuth("-", cached=True)
        ingest.accept_samples = lambda auth, body, encoding: _accepted("-", 80)
    elif LAYER == "validate":
        ingest.accept_samples = _validate_only
    elif LAYER == "accept":
        ingest._kick = lambda task, batch_id: None
    elif LAYER != "full":
        raise SystemExit(f"BENCH_LAYER: unknown layer {LAYER!r}")
