"""Factories every app's tests use: a host with its GPUs and token, a wire-format v1 batch,
and its gzip body. tests/conftest.py re-exports them for older imports."""

from __future__ import annotations

import gzip
import time
import uuid

import orjson


def make_host(team, name: str = "gpu-node-1", gpus: int = 2):
    from greenops.telemetry.models import Gpu, Host

    host = Host(team=team, name=name, instance_type="p4d.24xlarge", region="us-east-1",
                provider="aws")
    token = host.set_new_token()
    host.save()
    for i in range(gpus):
        Gpu.objects.create(host=host, index=i, uuid=f"GPU-{uuid.uuid4()}",
                           name="NVIDIA A100-SXM4-40GB", power_limit_w=400.0)
    return host, token


def make_batch(n_per_gpu: int = 5, gpus=(0, 1), start: float | None = None, step: float = 1.0,
               source: str = "nvml", **overrides) -> dict:
    """A valid wire-format v1 batch: n_per_gpu samples for each GPU, one per `step` seconds."""
    start = time.time() - n_per_gpu * step - 5 if start is None else start
    cols: dict[str, list] = {k: [] for k in (
        "ts", "gpu_index", "util_pct", "mem_used_mib", "power_w", "energy_mj", "energy_j",
        "energy_method", "temp_c", "sm_clock_mhz")}
    for g in gpus:
        for i in range(n_per_gpu):
            cols["ts"].append(start + i * step)
            cols["gpu_index"].append(g)
            cols["util_pct"].append(50.0 + g)
            cols["mem_used_mib"].append(1024.0)
            cols["power_w"].append(200.0 + 10 * g)
            cols["energy_mj"].append(1_000_000 + int(i * step * (200 + 10 * g) * 1000))
            cols["energy_j"].append(None if i == 0 else step * (200.0 + 10 * g))
            cols["energy_method"].append(None if i == 0 else "counter")
            cols["temp_c"].append(60.0)
            cols["sm_clock_mhz"].append(1410.0)
    doc = {"batch_id": str(uuid.uuid4()), "agent_version": "0.1.0", "sent_at": time.time(),
           "source": source, "samples": cols}
    doc.update(overrides)
    return doc


def gz(doc) -> bytes:
    return gzip.compress(orjson.dumps(doc) if not isinstance(doc, bytes) else doc)
