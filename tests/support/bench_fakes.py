"""Test doubles for ``greenops-agent bench``: a fake NVML whose energy counter a fake
benchmark command drives, so a run's GPU energy is known exactly.

``--nvml-lib tests.support.bench_fakes`` loads this module; its pynvml names are those of a
:class:`CounterFileNvml` (one GPU). The counter is the agent_fakes starting value plus the
millijoules written in the file named by BENCH_FAKES_ENERGY_FILE, which
``python -m tests.support.bench_fakes`` (the fake benchmark) adds its energy to. The driver version
comes from BENCH_FAKES_DRIVER, so a test can change the "hardware" between runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.support.agent_fakes import FakeNvml

DEFAULT_DRIVER = "550.54.15"


class CounterFileNvml(FakeNvml):
    def __init__(self, energy_file: Path | None = None, n: int = 1) -> None:
        super().__init__(n=n)
        self.energy_file = energy_file

    def _file(self) -> Path:
        return self.energy_file or Path(os.environ["BENCH_FAKES_ENERGY_FILE"])

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self._hit("nvmlDeviceGetTotalEnergyConsumption")
        path = self._file()
        used_mj = int(path.read_text() or "0") if path.exists() else 0
        return self.energy_mj[handle] + used_mj

    def nvmlSystemGetDriverVersion(self) -> str:
        self._hit("nvmlSystemGetDriverVersion")
        return os.environ.get("BENCH_FAKES_DRIVER", DEFAULT_DRIVER)

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        self._hit("nvmlDeviceGetMaxClockInfo")
        return 1410


_module_fake: CounterFileNvml | None = None


def __getattr__(name: str) -> Any:
    global _module_fake
    if name.startswith("nvml") or name == "NVMLError":
        if _module_fake is None:
            _module_fake = CounterFileNvml()
        return getattr(_module_fake, name)
    raise AttributeError(name)


def write_profile(directory: Path, joules: list[float], count: int = 1000,
                  latency_ms: list[float] | None = None, exit_status: int = 0) -> Path:
    """The "code" of a checkout: what each repeat of the fake benchmark uses and does."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"joules": joules, "count": count, "latency_ms": latency_ms, "exit": exit_status}
    (directory / "profile.json").write_text(json.dumps(doc))
    return directory


def write_busy_profile(directory: Path, loops: int, watts: float = 300.0,
                       count: int = 1000) -> Path:
    """A checkout whose benchmark really works: ``loops`` iterations of CPU work, drawing
    ``watts`` while it runs, so its energy follows wall time and the runner's own noise (load,
    drift, a slow run) is in every figure, as on a real CI runner."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"loops": loops, "watts": watts, "count": count, "latency_ms": None, "exit": 0}
    (directory / "profile.json").write_text(json.dumps(doc))
    return directory


def _busy(loops: int) -> float:
    import time

    started = time.perf_counter()
    x = 0
    for i in range(loops):
        x = (x * 31 + i) % 1_000_003
    return time.perf_counter() - started


def fake_benchmark() -> int:
    """Use repeat i's joules (added to the counter file) and report the count it did."""
    profile = json.loads(Path("profile.json").read_text())
    if profile["exit"]:
        print("fake benchmark: CUDA out of memory", file=sys.stderr)
        return profile["exit"]
    i = int(os.environ["GREENOPS_BENCH_REPEAT"])
    if "loops" in profile:
        joules = profile["watts"] * _busy(profile["loops"])
    else:
        joules = profile["joules"][i % len(profile["joules"])]
    path = Path(os.environ["BENCH_FAKES_ENERGY_FILE"])
    used_mj = int(path.read_text() or "0") if path.exists() else 0
    # Written aside and renamed: the agent's sampler thread reads the file meanwhile, and a
    # half-written (truncated) file would look like a counter reset.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(used_mj + round(joules * 1000)))
    os.replace(tmp, path)
    result = os.environ.get("GREENOPS_BENCH_RESULT")
    if result:
        doc: dict = {"count": profile["count"]}
        if profile["latency_ms"]:
            doc["latency_ms"] = profile["latency_ms"]
        Path(result).write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(fake_benchmark())
