"""Host-activity test helpers: a host-samples document as collectors/host_activity.py sends it."""

from __future__ import annotations


def host_doc(t0: float) -> dict:
    return {
        "batch_id": "6f0e8d52-3b41-4c1e-9a57-2f8d1c0b7e33", "agent_version": "0.1.0",
        "samples": {
            "ts": [t0, t0 + 15, t0 + 45],
            "interval_s": [15.0, 15.0, 30.0],
            "cpu_util_pct": [60.0, 20.0, None],
            "net_rx_bytes_s": [1e7, None, 5e6],
            "net_tx_bytes_s": [2e6, 1e6, 1e6],
            "disk_read_bytes_s": [4194304.0, 4194304.0, 0.0],
            "disk_write_bytes_s": [1048576.0, 1048576.0, 0.0],
        },
        "processes": {"ts": t0 + 45, "gpus": [
            {"gpu_index": 1, "pid": 4242, "name": "python3", "used_memory_mib": 2048.0},
            {"gpu_index": 0, "namespace": "inference", "pod": "vllm-0", "container": "vllm"},
        ]},
    }
