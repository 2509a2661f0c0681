"""Benchmarks test helpers: a run document as the agent's `bench` posts it."""

from __future__ import annotations

import time
import uuid

from collectors import bench_gate as gate

HW = "NVIDIA A100-SXM4-40GB 400 W 1410 MHz | driver 550.54.15"
BASE_J = [100.0, 100.5, 99.5, 100.2, 99.8]


def run_doc(regress_pct: float = 0.0, workload: str = "ranker", branch: str = "feature",
            commit: str = "c0ffee00", source: str = "nvml", hardware_key: str = HW,
            gated: bool = True, count: int = 1000) -> dict:
    """A run as `greenops-agent bench --base-dir` posts it: 5 base and 5 head repeats of
    ~100 J for 1,000 inferences, the head's energy scaled by (1 + regress_pct/100)."""
    samples = []
    for role, scale in (("base", 1.0), ("head", 1 + regress_pct / 100)):
        for i, j in enumerate(BASE_J):
            e = j * scale
            samples.append({"role": role, "index": i, "wall_s": 2.0, "gpu_energy_j": e,
                            "energy_method": "counter", "cpu_ram_energy_j": None,
                            "avg_power_w": e / 2.0, "gpu_util_pct": 90.0, "count": count,
                            "throughput_per_s": count / 2.0, "energy_per_inference_j": e / count,
                            "it_energy_per_inference_j": None, "p99_ms": None, "co2e_g": None,
                            "cost_usd": None, "cost_per_1k_usd": None})
    comparison = None
    if gated:
        def values(role):
            return {k.key: [s[k.key] for s in samples if s["role"] == role] for k in gate.KPIS}
        if source == "simulated":
            comparison = gate.all_inconclusive("simulated GPUs: a simulated run is never gated",
                                               "merge base", head=values("head")).as_dict()
        else:
            comparison = gate.compare(values("base"), values("head"),
                                      "merge base 1a2b3c4d, interleaved", paired=True).as_dict()
    return {"run_id": str(uuid.uuid4()), "workload": workload, "source": source,
            "agent_version": "0.1.0", "commit": commit, "branch": branch,
            "base_commit": "1a2b3c4d", "command": "python bench.py", "started_at": time.time(),
            "labels": {"model": "resnet50"},
            "hardware": {"gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-40GB"}],
                         "driver_version": "550.54.15", "source": source},
            "hardware_key": hardware_key, "host_energy": None,
            "settings": {"repeat": 5, "warmup": 1}, "samples": samples,
            "comparison": comparison}
