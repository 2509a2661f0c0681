"""The columnar sample buffer and the v1 wire encoding of a batch.

Samples are appended to one list per field rather than stored as a dict per sample: the hot
path then costs a few list appends, and the JSON is already in the columnar shape the server
parses (one array per field, all of the same length).
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from typing import Any

from collectors import __version__
from collectors.sources import Reading

# Sent only when some sample of the batch has a value (see SampleBuffer.columns).
PROFILE_FIELDS = (
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "nvlink_tx_kib_s",
    "nvlink_rx_kib_s",
)
FIELDS = (
    "ts",
    "gpu_index",
    "util_pct",
    "mem_used_mib",
    "power_w",
    "energy_mj",
    "energy_j",
    "energy_method",
    "temp_c",
    "sm_clock_mhz",
    "mem_util_pct",
    "mem_clock_mhz",
    "pcie_tx_kib_s",
    "pcie_rx_kib_s",
    "throttle_reasons",
    "power_limit_w",
    *PROFILE_FIELDS,
)


class SampleBuffer:
    """Samples gathered since the last batch, one list per wire field."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.ts: list[float] = []
        self.gpu_index: list[int] = []
        self.util_pct: list[float | None] = []
        self.mem_used_mib: list[float | None] = []
        self.power_w: list[float | None] = []
        self.energy_mj: list[int | None] = []
        self.energy_j: list[float | None] = []
        self.energy_method: list[str | None] = []
        self.temp_c: list[float | None] = []
        self.sm_clock_mhz: list[float | None] = []
        self.mem_util_pct: list[float | None] = []
        self.mem_clock_mhz: list[float | None] = []
        self.pcie_tx_kib_s: list[float | None] = []
        self.pcie_rx_kib_s: list[float | None] = []
        self.throttle_reasons: list[int | None] = []
        self.power_limit_w: list[float | None] = []
        self.sm_active_pct: list[float | None] = []
        self.sm_occupancy_pct: list[float | None] = []
        self.tensor_active_pct: list[float | None] = []
        self.dram_active_pct: list[float | None] = []
        self.nvlink_tx_kib_s: list[float | None] = []
        self.nvlink_rx_kib_s: list[float | None] = []

    def __len__(self) -> int:
        return len(self.ts)

    def append(
        self,
        ts: float,
        gpu_index: int,
        r: Reading,
        energy_j: float | None,
        energy_method: str | None,
    ) -> None:
        self.ts.append(ts)
        self.gpu_index.append(gpu_index)
        self.util_pct.append(r.util_pct)
        self.mem_used_mib.append(r.mem_used_mib)
        self.power_w.append(r.power_w)
        self.energy_mj.append(r.energy_mj)
        self.energy_j.append(energy_j)
        self.energy_method.append(energy_method)
        self.temp_c.append(r.temp_c)
        self.sm_clock_mhz.append(r.sm_clock_mhz)
        self.mem_util_pct.append(r.mem_util_pct)
        self.mem_clock_mhz.append(r.mem_clock_mhz)
        self.pcie_tx_kib_s.append(r.pcie_tx_kib_s)
        self.pcie_rx_kib_s.append(r.pcie_rx_kib_s)
        self.throttle_reasons.append(r.throttle_reasons)
        self.power_limit_w.append(r.power_limit_w)
        self.sm_active_pct.append(r.sm_active_pct)
        self.sm_occupancy_pct.append(r.sm_occupancy_pct)
        self.tensor_active_pct.append(r.tensor_active_pct)
        self.dram_active_pct.append(r.dram_active_pct)
        self.nvlink_tx_kib_s.append(r.nvlink_tx_kib_s)
        self.nvlink_rx_kib_s.append(r.nvlink_rx_kib_s)

    def columns(self) -> dict[str, list[Any]]:
        """The wire columns. A profiling column that is null throughout is left out: most
        hosts run no dcgm-exporter, and the server stores an absent optional column as null
        (unknown) anyway, so the batch need not carry six columns of nulls."""
        out = {name: getattr(self, name) for name in FIELDS}
        for name in PROFILE_FIELDS:
            column = out[name]
            if column.count(None) == len(column):  # C-speed: the journal calls this each tick
                del out[name]
        return out


def build_batch(columns: dict[str, list[Any]], source: str, batch_id: str | None = None) -> dict:
    """The v1 batch document. The id is fixed here, once: every resend carries the same one."""
    return {
        "batch_id": batch_id or str(uuid.uuid4()),
        "agent_version": __version__,
        "sent_at": time.time(),
        "source": source,
        "samples": columns,
    }


def encode(doc: dict) -> bytes:
    # mtime=0 keeps the bytes a pure function of the document (handy for tests and dedupe).
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode("utf-8"), mtime=0)


def decode(payload: bytes) -> dict:
    return json.loads(gzip.decompress(payload))


def restamp(payload: bytes, sent_at: float, spool: dict | None = None) -> bytes:
    """Set ``sent_at`` to the moment of sending: a spooled batch may go out hours late, and
    ``sent_at`` then still says when it left the host (the server checks it is a number;
    ``greenops-agent doctor`` measures clock skew against GET /api/v1/time). ``spool``
    (depth, oldest_age_s) tells the server how far behind this host's shipping is."""
    doc = decode(payload)
    doc["sent_at"] = sent_at
    if spool is not None:
        doc["spool"] = spool
    return encode(doc)
