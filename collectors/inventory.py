"""The host inventory: which GPUs this host has, registered before any sample is shipped.

The server needs the GPU's uuid, model and power limit to attribute samples (which arrive
with a bare ``gpu_index``) to a GPU row, so it is posted at start and again whenever the
server says it does not know a ``gpu_index`` (after a GPU swap, or a server-side reset).
"""

from __future__ import annotations

import dataclasses
import json
import socket

from collectors import __version__
from collectors.sources import GpuInfo
from collectors.transport import HttpTransport, Response

PATH = "/api/v1/inventory"


def build_inventory(gpus: list[GpuInfo], hostname: str | None = None) -> dict:
    return {
        "agent_version": __version__,
        "hostname": hostname or socket.gethostname(),
        "gpus": [_device(g) for g in gpus],
    }


def _device(g: GpuInfo) -> dict:
    # kind and vendor only where the source knows them (amd-smi, neuron-monitor, tegrastats):
    # NVML's inventory stays what servers before issue 33 were sent; the server derives both.
    doc = dataclasses.asdict(g)
    for key in ("kind", "vendor"):
        if doc[key] is None:
            del doc[key]
    return doc


def register(transport: HttpTransport, doc: dict, timeout_s: float | None = None) -> Response:
    # Plain JSON, not gzip: it is small and sent once per start.
    return transport.post(PATH, json.dumps(doc).encode("utf-8"), gzipped=False, timeout_s=timeout_s)
