"""`greenops-agent doctor`: check what this host can measure and whether it can deliver.

Each check is a plain function returning a Check, so tests call them one by one. Nothing here
changes state: no enrollment, no spool writes.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from collectors import probe
from collectors.sources import Reading

OK, WARN, FAIL = "ok", "warn", "FAIL"
# The server refuses samples more than 300 s in its future (INGEST_MAX_FUTURE_S); warn well
# before that, because energy per window and alert timing also suffer from a skewed clock.
SKEW_WARN_S = 5.0
SKEW_FAIL_S = 300.0
# Every metric a reading carries: the doctor reports each one the GPU supports or lacks.
# What NVML can measure: the DCGM profiling fields come only from dcgm-exporter.
DCGM_ONLY = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")
METRICS = tuple(m for m in Reading._fields if m not in DCGM_ONLY)
RAPL_FILE = Path("/sys/class/powercap/intel-rapl/intel-rapl:0/energy_uj")


@dataclass(frozen=True)
class Check:
    status: str
    name: str
    detail: str

    def line(self) -> str:
        return f"[{self.status:>4}] {self.name}: {self.detail}"


def check_server(server: str | None, timeout_s: float = 3.0) -> list[Check]:
    if not server:
        return [Check(FAIL, "server", "no server URL: run greenops-agent enroll, or set "
                      "GREENOPS_SERVER")]
    answer, skew = probe.server_time(server, timeout_s)
    if answer.status is None:
        return [Check(FAIL, "server", f"cannot reach {server}: {answer.error}")]
    if skew is None:
        return [Check(FAIL, "server", f"{server} answered HTTP {answer.status} to /api/v1/time: "
                      "is this a GreenOps server?")]
    checks = [Check(OK, "server", f"{server} reachable ({answer.rtt_s * 1000:.0f} ms)")]
    word = "behind" if skew > 0 else "ahead of"
    text = f"this host's clock is {abs(skew):.1f} s {word} the server's"
    status = FAIL if abs(skew) >= SKEW_FAIL_S else WARN if abs(skew) >= SKEW_WARN_S else OK
    if status != OK:
        text += "; fix NTP (chrony/systemd-timesyncd)"
    checks.append(Check(status, "clock skew", text))
    return checks


def check_token(server: str | None, token: str | None, timeout_s: float = 3.0) -> Check:
    if not token:
        return Check(FAIL, "token", "no host token: run greenops-agent enroll")
    if not server:
        return Check(WARN, "token", "not checked (no server)")
    answer = probe.whoami(server, token, timeout_s)
    if answer.ok:
        return Check(OK, "token", f"accepted: host {answer.doc.get('host')} in team "
                     f"{answer.doc.get('team')}")
    if answer.status in (401, 403):
        return Check(FAIL, "token", "rejected by the server (revoked, rotated or removed host?): "
                     "ask an admin to rotate it, or enroll again")
    return Check(WARN, "token", f"not checked: {answer.server_message()}")


def check_gpus(simulate: int | None, nvml_lib: str | None, lib=None) -> list[Check]:
    """NVML present? Which metrics does each GPU support? `lib` replaces pynvml (tests)."""
    if simulate:
        return [Check(WARN, "gpus", f"{simulate} simulated GPUs (no NVML; data marked simulated)")]
    from collectors.sources import NvmlSource, NvmlUnavailable, load_nvml_lib

    try:
        source = NvmlSource(lib if lib is not None else load_nvml_lib(nvml_lib))
    except (NvmlUnavailable, ImportError) as exc:
        return [Check(FAIL, "nvml", f"{exc}")]
    try:
        gpus = source.gpus()
        if not gpus:
            return [Check(FAIL, "nvml", "NVML works but found no GPUs")]
        checks = [Check(OK, "nvml", f"{len(gpus)} GPU(s)")]
        for gpu in gpus:
            reading = source.read(gpu.index)  # one read finds what this GPU does not support
            values = reading._asdict()
            missing = sorted(set(source.unsupported(gpu.index)) & set(METRICS)
                             | {m for m, v in values.items() if v is None and m in METRICS})
            supported = [m for m in METRICS if m not in missing]
            limit = f", power limit {gpu.power_limit_w:g} W" if gpu.power_limit_w else ""
            detail = f"{gpu.name}{limit}; measures {', '.join(supported) or 'nothing'}"
            if missing:
                detail += f"; not available: {', '.join(missing)}"
            energy = ("energy from the NVML counter" if "energy_mj" in supported
                      else "energy integrated from power (no counter)")
            status = OK if "energy_mj" in supported else WARN
            checks.append(Check(status, f"gpu {gpu.index}", f"{detail}; {energy}"))
        return checks
    finally:
        source.close()


def check_codecarbon(rapl_file: Path = RAPL_FILE) -> Check:
    """Which way codecarbon would measure CPU energy here, without importing it (its import
    initialises NVML and is slow)."""
    if importlib.util.find_spec("codecarbon") is None:
        return Check(WARN, "codecarbon", "not installed: CPU and RAM energy are not measured "
                     "(pip install codecarbon)")
    from importlib.metadata import version

    try:
        readable = rapl_file.is_file() and bool(rapl_file.read_text().strip())
    except OSError:
        readable = False
    if readable:
        mode = "CPU measured by RAPL"
    else:
        mode = ("CPU estimated from its TDP (RAPL not readable: "
                f"{rapl_file} missing or needs root)")
    return Check(OK if readable else WARN, "codecarbon",
                 f"{version('codecarbon')}: {mode}; RAM estimated from its size")


def check_spool(path: Path) -> Check:
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    import os

    if not os.access(parent, os.W_OK):
        return Check(FAIL, "spool", f"{path}: {parent} is not writable by this user")
    return Check(OK, "spool", f"{path}")


def check_dcgm(target, fetch=None) -> list[Check]:
    """A ``[[scrape]] kind = "dcgm"`` target: reachable, and what its page measures per GPU
    (the profiling fields are off in dcgm-exporter's default counters)."""
    if target is None:
        return []
    from collectors.dcgm import PROFILE, DcgmScraper, DcgmUnavailable

    try:
        page = DcgmScraper(target.url, target.labels, fetch, timeout_s=3.0).scrape()
    except DcgmUnavailable as exc:
        return [Check(FAIL, "dcgm-exporter", str(exc))]
    checks = [Check(OK, "dcgm-exporter", f"{target.url}: {len(page)} GPU(s)")]
    for uuid, gpu in sorted(page.items(), key=lambda kv: (kv[1].gpu is None, kv[1].gpu or 0)):
        missing = [m for m in PROFILE if m not in gpu.values]
        detail = (f"{gpu.model} {uuid}; measures {', '.join(sorted(gpu.values)) or 'nothing'}")
        if missing:
            detail += (f"; not on the page: {', '.join(missing)} (enable the DCGM_FI_PROF_* "
                       "rows of dcgm-exporter's counters CSV)")
        checks.append(Check(WARN if missing else OK, f"dcgm gpu {gpu.gpu}", detail))
    return checks


def run_checks(config) -> list[Check]:
    checks = check_server(config.server)
    checks.append(check_token(config.server, config.token))
    checks += check_gpus(config.simulate, config.nvml_lib)
    checks += check_dcgm(next((t for t in config.scrape if t.kind == "dcgm"), None))
    checks.append(check_codecarbon())
    checks.append(check_spool(config.spool_path))
    return checks
