"""``greenops-agent bench``: measure a benchmark command's energy per inference, and gate on it.

    greenops-agent bench --workload ranker --repeat 7 --count-from out/bench.json \\
        --baseline-branch main --report gate.md -- python bench.py --batch 64

Each repeat runs COMMAND once while a thread samples the GPUs through the agent's own NVML
source (energy from the NVML total-energy counter through collectors.energy, as the agent
does; power and utilisation alongside), and, where codecarbon is installed, CPU and RAM
energy through the agent's codecarbon source. With the inferences the command did (``--count``,
or the ``count`` of a JSON file it writes, which may also carry ``latency_ms`` samples or a
``p99_ms``) every repeat gives throughput, GPU energy per inference, p99 and cost per 1k.

The command sees GREENOPS_BENCH_RESULT (the ``--count-from`` path, removed before each repeat
so that a stale file is never read), GREENOPS_BENCH_ROLE (``base``/``head``),
GREENOPS_BENCH_REPEAT (0, 1, ...) and GREENOPS_BENCH_WARMUP (``1`` for warm-up runs).

Baselines: ``--base-ref REF`` (the merge base of REF and HEAD, in a temporary git worktree) or
``--base-dir DIR`` runs base and head alternately in pairs on this runner (AB BA AB ...: the
fairest comparison, and the default of the CI files); ``--baseline FILE`` reads a run written
earlier with ``--output``; ``--baseline-branch BRANCH`` asks the server for the latest stored
run of that branch on the same hardware (with ``--base-ref``: only when interleaving is
impossible). Exit codes: 0 pass (or no gate asked), 1 regression, 3 inconclusive, 4 no GPU with
a gate asked, 2 usage errors or a failing command; a failed upload is spooled for the next run
and never changes the exit code. Nothing here imports Django. See docs/ci-gate.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors import __version__
from collectors import bench_gate as gate
from collectors.energy import EnergyAccountant
from collectors.sources import GpuSource

COMMANDS = ("bench",)
RUNS_PATH = "/api/v1/benchmarks/runs"
BASELINE_PATH = "/api/v1/benchmarks/baseline"
EXIT_ERROR = 2
EXIT_NO_GPU = gate.EXIT_CODES[gate.NO_GPU]
DEFAULT_REPEAT = 10  # pairs; bench/gate measures what these defaults catch on a noisy runner
DEFAULT_MAX_REPEAT = 20
DEFAULT_REPEAT_STEP = 5
SAMPLE_INTERVAL_S = 0.1  # NVML updates power about every 20-100 ms; finer is wasted calls
MAX_GAP_S = 5.0  # a longer gap between two counter reads is not trusted (see energy.py)
J_PER_KWH = 3.6e6


class BenchError(Exception):
    """Something the user must fix; printed as one line, exit 2."""


# --- one repeat ------------------------------------------------------------------------------


class GpuSampler:
    """Reads the chosen GPUs every ``interval_s`` on a thread while the command runs.

    Energy comes from the agent's EnergyAccountant, so the counter rules (reset, gap, power
    fall-back) are the agent's. A read at start and at stop bounds the interval exactly.
    """

    def __init__(self, source: GpuSource, indexes: Sequence[int],
                 interval_s: float = SAMPLE_INTERVAL_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.indexes = list(indexes)
        self.interval_s = interval_s
        self.monotonic = monotonic
        self.accountant = EnergyAccountant(MAX_GAP_S)
        self.energy_j = 0.0
        self.methods: set[str] = set()
        self.missing_energy = False
        self.util: list[float] = []
        self._seen: set[int] = set()  # GPUs read once: their next read closes an interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _read(self) -> None:
        with self._lock:
            mono = self.monotonic()
            for i in self.indexes:
                r = self.source.read(i)
                energy, method = self.accountant.update(i, mono, r.energy_mj, r.power_w)
                if r.util_pct is not None:
                    self.util.append(r.util_pct)
                if method is None:
                    if i in self._seen:
                        self.missing_energy = True
                    self._seen.add(i)
                    continue
                self.energy_j += energy or 0.0
                self.methods.add(method)

    def start(self) -> None:
        self._read()
        self._thread = threading.Thread(target=self._run, name="greenops-bench", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()


@dataclass
class Result:
    """What the command reports about its own work (``--count-from`` file)."""

    count: int | None = None
    p99_ms: float | None = None


def p99(latencies_ms: Sequence[float]) -> float:
    """The 99th percentile, linear between closest ranks (numpy's default)."""
    s = sorted(latencies_ms)
    pos = (len(s) - 1) * 0.99
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def read_result(path: Path) -> Result:
    """``{"count": N, "latency_ms": [...]}`` or ``{"count": N, "p99_ms": x}``."""
    if not path.exists():
        raise BenchError(f"the command did not write {path} (--count-from): it must write "
                         '{"count": N} there, optionally with "latency_ms" or "p99_ms"')
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BenchError(f"{path}: expected a JSON object with a \"count\"")
    count = doc.get("count")
    if type(count) is not int or count <= 0:
        raise BenchError(f"{path}: \"count\" must be a positive integer (the inferences done)")
    result = Result(count=count)
    latencies = doc.get("latency_ms")
    if latencies is not None:
        if (not isinstance(latencies, list) or not latencies
                or not all(isinstance(v, int | float) and v >= 0 for v in latencies)):
            raise BenchError(f"{path}: \"latency_ms\" must be a list of non-negative numbers")
        result.p99_ms = p99(latencies)
    elif doc.get("p99_ms") is not None:
        value = doc["p99_ms"]
        if not isinstance(value, int | float) or value < 0:
            raise BenchError(f"{path}: \"p99_ms\" must be a non-negative number")
        result.p99_ms = float(value)
    return result


@dataclass
class Settings:
    """How each repeat is run and priced; the same for base and head."""

    command: list[str]
    gpus: list[int]
    count: int | None = None
    count_from: Path | None = None
    pue: float | None = None
    grid_intensity_g_per_kwh: float | None = None
    usd_per_hour: float | None = None
    sample_interval_s: float = SAMPLE_INTERVAL_S


def _ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den * scale


def run_once(settings: Settings, source: GpuSource, host_energy: Any | None, cwd: Path,
             role: str, index: int, warmup: bool = False) -> dict:
    """Run the command once and measure it. Raises BenchError when the command fails."""
    env = dict(os.environ, GREENOPS_BENCH_ROLE=role, GREENOPS_BENCH_REPEAT=str(index),
               GREENOPS_BENCH_WARMUP="1" if warmup else "0")
    result_path = None
    if settings.count_from is not None:
        result_path = settings.count_from if settings.count_from.is_absolute() \
            else cwd / settings.count_from
        env["GREENOPS_BENCH_RESULT"] = str(result_path)
        result_path.unlink(missing_ok=True)
    sampler = GpuSampler(source, settings.gpus, settings.sample_interval_s)
    if host_energy is not None:
        host_energy.start()
    sampler.start()
    started = time.monotonic()
    try:
        proc = subprocess.run(settings.command, cwd=cwd, env=env, check=False)
    except OSError as exc:
        sampler.stop()
        raise BenchError(f"cannot run {shlex.join(settings.command)}: {exc}") from None
    wall_s = time.monotonic() - started
    sampler.stop()
    what = f"{'warm-up' if warmup else 'repeat'} {index} ({role}, in {cwd})"
    if proc.returncode != 0:
        raise BenchError(f"the benchmark command failed with exit status {proc.returncode} "
                         f"in {what}: {shlex.join(settings.command)}; nothing was gated")
    cpu_ram_j = None
    if host_energy is not None:
        reading = host_energy.read(wall_s)
        if reading.cpu_energy_j is not None and reading.ram_energy_j is not None:
            cpu_ram_j = reading.cpu_energy_j + reading.ram_energy_j
    count = settings.count
    p99_ms = None
    if result_path is not None and not warmup:
        res = read_result(result_path)
        count, p99_ms = res.count, res.p99_ms
    gpu_j = None if sampler.missing_energy or not sampler.methods else sampler.energy_j
    it_j = gpu_j + cpu_ram_j if gpu_j is not None and cpu_ram_j is not None else None
    # Carbon and cost need figures only the user knows on a CI runner: the site's PUE and
    # grid intensity, and the runner's price. Without them they stay unknown, never 0.
    energy_for_carbon = it_j if it_j is not None else gpu_j
    co2e_g = None
    if energy_for_carbon is not None and settings.grid_intensity_g_per_kwh is not None:
        co2e_g = (energy_for_carbon / J_PER_KWH * (settings.pue or 1.0)
                  * settings.grid_intensity_g_per_kwh)
    cost_usd = settings.usd_per_hour * wall_s / 3600.0 if settings.usd_per_hour else None
    return {
        "role": role, "index": index, "wall_s": wall_s, "gpu_energy_j": gpu_j,
        "energy_method": "+".join(sorted(sampler.methods)) or None,
        "cpu_ram_energy_j": cpu_ram_j,
        "avg_power_w": _ratio(gpu_j, wall_s),
        "gpu_util_pct": sum(sampler.util) / len(sampler.util) if sampler.util else None,
        "count": count, "throughput_per_s": _ratio(count, wall_s),
        "energy_per_inference_j": _ratio(gpu_j, count),
        "it_energy_per_inference_j": _ratio(it_j, count),
        "p99_ms": p99_ms, "co2e_g": co2e_g, "cost_usd": cost_usd,
        "cost_per_1k_usd": _ratio(cost_usd, count, 1000.0),
    }


def measure(settings: Settings, source: GpuSource, host_energy: Any | None, repeat: int,
            warmup: int, head_dir: Path, base_dir: Path | None = None,
            log: Callable[[str], None] = lambda s: None, first: int = 0) -> list[dict]:
    """Warm up, then run the repeats. With ``base_dir`` base and head alternate in pairs,
    pair i in the order base-head for even i and head-base for odd i (AB BA AB ...): a runner
    that drifts one way during the job then favours neither side. ``first``: the index of
    the first pair (more pairs after an undecided gate continue the numbering, no warm-up)."""
    for i in range(warmup):
        for role, cwd in _order(i, head_dir, base_dir):
            log(f"warm-up {i + 1}/{warmup} ({role})")
            run_once(settings, source, host_energy, cwd, role, i, warmup=True)
    samples = []
    for i in range(first, first + repeat):
        for role, cwd in _order(i, head_dir, base_dir):
            s = run_once(settings, source, host_energy, cwd, role, i)
            log(f"repeat {i + 1}/{first + repeat} ({role}): {s['wall_s']:.2f} s, "
                f"GPU {_fmt(s['gpu_energy_j'], 'J')}, "
                f"{_fmt(s['energy_per_inference_j'], 'J/inference', 4)}")
            samples.append(s)
    return samples


def _order(i: int, head_dir: Path, base_dir: Path | None) -> list[tuple[str, Path]]:
    if base_dir is None:
        return [("head", head_dir)]
    pair = [("base", base_dir), ("head", head_dir)]
    return pair if i % 2 == 0 else pair[::-1]


def _fmt(value: float | None, unit: str, digits: int = 1) -> str:
    return "unknown" if value is None else f"{value:.{digits}f} {unit}"


# --- the run document ------------------------------------------------------------------------


def hardware(source: GpuSource, indexes: Sequence[int]) -> dict:
    """What makes two runs comparable: GPU models, driver, power limits, clocks."""
    by_index = {g.index: g for g in source.gpus()}
    driver = getattr(source, "driver_version", lambda: None)()
    max_clock = getattr(source, "max_sm_clock_mhz", lambda i: None)
    gpus = [{"index": i, "name": by_index[i].name, "power_limit_w": by_index[i].power_limit_w,
             "max_sm_clock_mhz": max_clock(i)} for i in indexes]
    return {"gpus": gpus, "driver_version": driver, "source": source.kind}


def hardware_key(hw: dict) -> str:
    """A readable key: a change in any part starts a new baseline."""
    parts = []
    for g in hw["gpus"]:
        limit = f"{g['power_limit_w']:g} W" if g.get("power_limit_w") is not None else "? W"
        clock = f"{g['max_sm_clock_mhz']:g} MHz" if g.get("max_sm_clock_mhz") else "? MHz"
        parts.append(f"{g['name']} {limit} {clock}")
    return f"{' + '.join(parts)} | driver {hw.get('driver_version') or '?'}"


def git_value(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                             check=False, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value and value != "HEAD" else None


def git_info(cwd: Path, commit: str | None, branch: str | None) -> tuple[str, str]:
    """Flags, then the CI's variables (GitHub Actions, GitLab CI), then git itself."""
    env = os.environ
    commit = (commit or env.get("GITHUB_SHA") or env.get("CI_COMMIT_SHA")
              or git_value(["rev-parse", "HEAD"], cwd) or "")
    branch = (branch or env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME")
              or env.get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME") or env.get("CI_COMMIT_REF_NAME")
              or git_value(["rev-parse", "--abbrev-ref", "HEAD"], cwd) or "")
    return commit, branch


def kpi_values(samples: Sequence[dict], role: str) -> dict[str, list[float | None]]:
    """Per KPI, one value per repeat of ``role`` in repeat order (pair i is index i)."""
    rows = sorted((s for s in samples if s["role"] == role), key=lambda s: s["index"])
    return {k.key: [s.get(k.key) for s in rows] for k in gate.KPIS}


@dataclass
class Baseline:
    description: str
    samples: list[dict] = field(default_factory=list)  # role "base"
    hardware_key: str | None = None
    simulated: bool = False
    missing: str = ""  # why there is none, when there is none
    commit: str = ""
    settings: dict | None = None  # a stored run's settings; None: measured in this very job
    interleaved: bool = False  # measured alongside, in pairs (else: at another time)


# A setting that differs between a stored baseline and this run: the flag, and the KPIs it
# makes incomparable (the others are still compared).
SETTING_EFFECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "usd_per_hour": ("--usd-per-hour", ("cost_per_1k_usd",)),
    "count": ("--count", ("throughput_per_s",)),
    "pue": ("--pue", ()),
    "grid_intensity_g_per_kwh": ("--grid-intensity", ()),
}


def _setting(value: object) -> str:
    return "not given" if value is None else f"{value:g}" if isinstance(value, float) \
        else str(value)


def differing_settings(base: dict | None, head: dict) -> tuple[dict[str, str], list[str]]:
    """The KPIs that settings differing between the sides make incomparable (with the
    reason), and one note per differing setting."""
    excluded: dict[str, str] = {}
    notes: list[str] = []
    if base is None:
        return excluded, notes
    for key, (flag, kpis) in SETTING_EFFECTS.items():
        b, h = base.get(key), head.get(key)
        if b == h:
            continue
        what = f"{flag} differs (baseline: {_setting(b)}; this run: {_setting(h)})"
        labels = [gate.KPI_BY_KEY[k].label for k in kpis]
        notes.append(f"Settings differ: {what}; "
                     + (f"{', '.join(labels)} not compared." if labels
                        else "only carbon is affected, and it is not gated."))
        for k in kpis:
            excluded[k] = what
    return excluded, notes


def gate_run(doc: dict, baseline: Baseline, tolerances: dict[str, float],
             alpha: float, gated: Sequence[str] = (gate.PRIMARY,)) -> gate.Comparison:
    head = kpi_values(doc["samples"], "head")

    def undecided(reason: str) -> gate.Comparison:
        result = gate.all_inconclusive(reason, baseline.description, alpha, head, gated=gated)
        result.crosses_time = not baseline.interleaved and not baseline.missing
        return result

    if doc["source"] == "simulated":
        return undecided("simulated GPUs: a simulated run is never gated")
    if baseline.missing:
        return undecided(baseline.missing)
    if baseline.simulated:
        return undecided("the baseline run is simulated: never gated on")
    if baseline.hardware_key is not None and baseline.hardware_key != doc["hardware_key"]:
        return undecided(f"hardware changed (baseline: {baseline.hardware_key}; this run: "
                         f"{doc['hardware_key']}): this run starts a new baseline")
    base = kpi_values(baseline.samples, "base")
    methods = [s.get("energy_method") for s in [*doc["samples"], *baseline.samples]]
    excluded = gate.estimated_kpis(methods)
    differ, notes = differing_settings(baseline.settings, doc.get("settings") or {})
    for key, reason in differ.items():
        excluded.setdefault(key, reason)
    result = gate.compare(base, head, baseline.description, tolerances, alpha, excluded,
                          paired=baseline.interleaved, gated=gated,
                          crosses_time=not baseline.interleaved)
    result.notes.extend(notes)
    return result


def _measured(started_at: object) -> str:
    if not isinstance(started_at, int | float):
        return ""
    return time.strftime(", measured %Y-%m-%d %H:%M UTC", time.gmtime(started_at))


def describe_stored(branch: str | None, commit: str | None, where: str,
                    started_at: object = None) -> str:
    """A stored baseline in words, saying plainly what is not known (never "?")."""
    if commit and branch:
        what = f"{branch} @ {commit[:12]}"
    elif commit:
        what = f"commit {commit[:12]}"
    elif branch:
        what = f"{branch} (commit not recorded)"
    else:
        what = "a run with no commit or branch recorded"
    return f"{what} ({where}{_measured(started_at)})"


def baseline_from_file(path: Path) -> Baseline:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return Baseline(f"file {path}", missing=f"no baseline: {path} does not exist (write "
                        "one with --output on the target branch)")
    except (OSError, ValueError) as exc:
        raise BenchError(f"--baseline {path}: not a run file ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list):
        raise BenchError(f"--baseline {path}: not a run file written by --output")
    samples = [dict(s, role="base") for s in doc["samples"] if s.get("role") == "head"]
    return Baseline(describe_stored(doc.get("branch"), doc.get("commit"), f"file {path}",
                                    doc.get("started_at")),
                    samples, doc.get("hardware_key"), doc.get("source") == "simulated",
                    commit=doc.get("commit") or "", settings=doc.get("settings") or {})


def merge_base_description(commit: str | None, base_dir: Path) -> str:
    what = f"merge base {commit[:12]}" if commit else \
        f"{base_dir} (not a git checkout: commit unknown)"
    return f"{what}, interleaved with this run on this runner"


class BenchSpool:
    """Runs the server did not take (unreachable, 5xx): one JSON file per run, sent again by
    the next ``bench`` with a server. The server stores a run_id once, so a resend is safe."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def default() -> Path:
        if env := os.environ.get("GREENOPS_BENCH_SPOOL"):
            return Path(env)
        state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        return Path(state) / "greenops-agent" / "bench-spool"

    def put(self, doc: dict) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{doc['run_id']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        return path

    def pending(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime)

    def flush(self, server: Server, warn: Callable[[str], None]) -> int:
        """Send what is spooled; keep what still cannot be sent. Returns how many were sent."""
        sent = 0
        for path in self.pending():
            try:
                doc = json.loads(path.read_text())
                server.post_run(doc)
            except ValueError:
                warn(f"spooled run {path.name} is not JSON: set aside as {path.name}.bad")
                path.rename(path.with_name(path.name + ".bad"))
                continue
            except UploadRefused as exc:
                warn(f"spooled run {path.name} refused for good ({exc}): set aside as "
                     f"{path.name}.refused")
                path.rename(path.with_name(path.name + ".refused"))
                continue
            except BenchError as exc:
                warn(f"spooled runs kept for the next run: {exc}")
                break
            path.unlink()
            sent += 1
        return sent


class UploadRefused(BenchError):
    """The server answered and refused the run (4xx): resending it will not help."""


class Server:
    """The two benchmark endpoints, with a team API token (or the host's token)."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, doc: dict | None = None) -> tuple[int, dict]:
        body = json.dumps(doc).encode() if doc is not None else None
        req = urllib.request.Request(self.url + path, data=body, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
            "User-Agent": f"greenops-agent/{__version__}"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read() or b"{}")
            except ValueError:
                answer = {}
            return exc.code, answer if isinstance(answer, dict) else {}
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise BenchError(f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}") from None

    def baseline(self, workload: str, branch: str, hw_key: str) -> Baseline:
        query = urllib.parse.urlencode({"workload": workload, "branch": branch,
                                        "hardware_key": hw_key})
        try:
            status, answer = self.request("GET", f"{BASELINE_PATH}?{query}")
        except BenchError as exc:  # no verdict without a baseline, but never a lost run
            return Baseline(f"{branch} (server)", missing=f"no baseline: {exc}")
        if status == 404:
            return Baseline(f"{branch} (server)", missing="no baseline: "
                            + answer.get("message", f"no stored run of {branch}"))
        if status != 200:
            raise BenchError(f"the server refused the baseline request: HTTP {status} "
                             f"{answer.get('field') or ''} {answer.get('message', '')}".strip())
        samples = [dict(s, role="base") for s in answer.get("samples", [])]
        return Baseline(describe_stored(answer.get("branch") or branch, answer.get("commit"),
                                        f"stored run {answer.get('id')}",
                                        answer.get("started_at")),
                        samples, answer.get("hardware_key"), answer.get("source") == "simulated",
                        commit=answer.get("commit") or "", settings=answer.get("settings") or {})

    def post_run(self, doc: dict) -> dict:
        status, answer = self.request("POST", RUNS_PATH, doc)
        if status not in (200, 201):
            error = UploadRefused if 400 <= status < 500 and status not in (401, 408, 429) \
                else BenchError
            raise error(f"the server refused the run: HTTP {status} "
                        f"{answer.get('field') or ''}: {answer.get('message', '')}")
        return answer


# --- the command line ------------------------------------------------------------------------


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="measure a benchmark command's energy per inference; gate on it",
        description="Run COMMAND --warmup + --repeat times while measuring its GPUs through "
        "NVML (and CPU/RAM through codecarbon where installed); derive throughput, GPU energy "
        "per inference, p99 and cost per 1k; compare with a baseline and fail only on a "
        "regression that is both beyond tolerance and statistically significant. "
        "Exit status: 0 pass or no baseline asked, 1 regression, 3 inconclusive, 4 no GPU "
        "with a gate asked, 2 error. A failed upload never changes it.")
    p.add_argument("--workload", required=True, help="the workload's slug on the server")
    p.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, metavar="N",
                   help=f"measured runs per side: pairs when interleaved (default "
                   f"{DEFAULT_REPEAT}; at least 5 pairs can reach p < 0.05)")
    p.add_argument("--max-repeat", type=int, default=DEFAULT_MAX_REPEAT, metavar="N",
                   help="interleaved: while energy per inference is undecided (beyond "
                   "tolerance, not significantly) run --repeat-step more pairs, up to N "
                   f"(default {DEFAULT_MAX_REPEAT}; = --repeat to never extend)")
    p.add_argument("--repeat-step", type=int, default=DEFAULT_REPEAT_STEP, metavar="N",
                   help=f"pairs added at a time (default {DEFAULT_REPEAT_STEP})")
    p.add_argument("--warmup", type=int, default=1, metavar="N", help="unmeasured runs first")
    count = p.add_mutually_exclusive_group()
    count.add_argument("--count", type=int, metavar="N", help="inferences one run does")
    count.add_argument("--count-from", metavar="FILE",
                       help='JSON the command writes: {"count": N, "latency_ms": [...]} or '
                       '{"count": N, "p99_ms": x}; relative to the command\'s directory')
    p.add_argument("--gpus", metavar="0,1", help="GPU indexes to measure (default: all)")
    p.add_argument("--simulate", type=int, metavar="N",
                   help="N simulated GPUs instead of NVML (labelled; never gated on)")
    p.add_argument("--nvml-lib", metavar="MODULE", help="a module with pynvml's names (tests)")
    p.add_argument("--no-host-energy", action="store_true",
                   help="do not measure CPU/RAM energy with codecarbon")
    here = p.add_mutually_exclusive_group()
    here.add_argument("--base-dir", metavar="DIR",
                      help="a checkout of the merge base: run it too, interleaved with this one")
    here.add_argument("--base-ref", metavar="REF",
                      help="check out the merge base of REF and HEAD in a temporary git "
                      "worktree and interleave it with this run (e.g. origin/main)")
    stored = p.add_mutually_exclusive_group()
    stored.add_argument("--baseline", metavar="FILE", help="a run written earlier by --output "
                        "(with --base-ref: used only when interleaving is impossible)")
    stored.add_argument("--baseline-branch", metavar="BRANCH",
                        help="the latest stored run of BRANCH on this hardware (needs --server; "
                        "with --base-ref: used only when interleaving is impossible)")
    p.add_argument("--tolerance", action="append", default=[], metavar="KPI=PCT",
                   help="allowed worsening in %% (defaults: energy_per_inference_j=5, "
                   "p99_ms=10, throughput_per_s=5, cost_per_1k_usd=5)")
    p.add_argument("--gate", action="append", default=[], metavar="KPI",
                   help="gate on this KPI too (energy per inference always decides; several "
                   "gated KPIs are Holm-corrected); the others are reported as secondary")
    p.add_argument("--alpha", type=float, default=gate.DEFAULT_ALPHA,
                   help="significance level (default 0.05)")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0 instead of 3 when the gate cannot decide (still printed); a "
                   "runner without a GPU still exits 4")
    p.add_argument("--spool-dir", metavar="DIR",
                   help="where runs the server did not take wait for the next run (default "
                   "$GREENOPS_BENCH_SPOOL, else ~/.local/state/greenops-agent/bench-spool)")
    p.add_argument("--report", metavar="FILE", help="write the table as Markdown (PR comment)")
    p.add_argument("--output", metavar="FILE", help="write the whole run as JSON")
    p.add_argument("--server", help="GreenOps server (default $GREENOPS_SERVER)")
    p.add_argument("--token", help="team API token (prefer $GREENOPS_API_TOKEN)")
    p.add_argument("--no-post", action="store_true", help="keep the run local")
    p.add_argument("--commit", help="this run's commit (default: CI variables, then git)")
    p.add_argument("--branch", help="this run's branch (default: CI variables, then git)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--pue", type=float, help="facility PUE for carbon (default 1.0: IT only)")
    p.add_argument("--grid-intensity", type=float, metavar="G_PER_KWH",
                   help="grid carbon intensity, g CO2e/kWh (without it carbon is unknown)")
    p.add_argument("--usd-per-hour", type=float,
                   help="the runner's price (without it cost per 1k is unknown)")
    p.add_argument("bench_command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key:
            raise BenchError(f"{flag} {v!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def tolerances(values: list[str]) -> dict[str, float]:
    out = {}
    for key, value in _pairs(values, "--tolerance").items():
        if key not in gate.KPI_BY_KEY:
            raise BenchError(f"--tolerance {key}: one of {', '.join(gate.KPI_BY_KEY)}")
        try:
            out[key] = float(value.rstrip("%"))
        except ValueError:
            raise BenchError(f"--tolerance {key}={value}: not a number of percent") from None
    return out


def open_source(args: argparse.Namespace) -> GpuSource:
    from collectors.simulated import SimulatedSource
    from collectors.sources import NvmlSource, NvmlUnavailable, load_nvml_lib

    if args.simulate:
        return SimulatedSource(args.simulate)
    try:
        return NvmlSource(load_nvml_lib(args.nvml_lib))
    except NvmlUnavailable as exc:
        raise BenchError(f"{exc}; without GPUs use --simulate N (never gated on)") from None


def open_host_energy(args: argparse.Namespace) -> Any | None:
    from collectors import host_energy

    if args.no_host_energy or args.simulate or not host_energy.codecarbon_installed():
        return None
    try:
        return host_energy.CodecarbonSource.detect()
    except Exception as exc:  # codecarbon's start-up can fail in many ways; GPU still counts
        print(f"greenops-agent bench: CPU/RAM energy off: codecarbon failed ({exc})",
              file=sys.stderr)
        return None


def build_doc(args: argparse.Namespace, settings: Settings, source: GpuSource,
              host_energy: Any | None, samples: list[dict], head_dir: Path,
              base_dir: Path | None) -> dict:
    commit, branch = git_info(head_dir, args.commit, args.branch)
    hw = hardware(source, settings.gpus)
    doc = {
        "run_id": str(uuid.uuid4()), "workload": args.workload, "source": source.kind,
        "agent_version": __version__, "commit": commit, "branch": branch,
        "base_commit": git_value(["rev-parse", "HEAD"], base_dir) if base_dir else None,
        "command": shlex.join(settings.command), "started_at": time.time(),
        "labels": _pairs(args.label, "--label"), "hardware": hw,
        "hardware_key": hardware_key(hw),
        "host_energy": ({"source": "codecarbon", "cpu_method": host_energy.cpu_method,
                         "ram_method": host_energy.ram_method} if host_energy else None),
        "settings": {"repeat": args.repeat, "warmup": args.warmup, "pue": settings.pue,
                     "grid_intensity_g_per_kwh": settings.grid_intensity_g_per_kwh,
                     "usd_per_hour": settings.usd_per_hour, "count": settings.count,
                     "count_from": str(settings.count_from) if settings.count_from else None,
                     "interleaved": base_dir is not None},
        "samples": samples, "comparison": None,
    }
    return doc


def main(args: argparse.Namespace) -> int:
    cleanup: list[Callable[[], None]] = []
    try:
        return _main(args, cleanup)
    except BenchError as exc:
        print(f"greenops-agent bench: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        for undo in cleanup:
            undo()


def warn(message: str) -> None:
    print(f"greenops-agent bench: warning: {message}", file=sys.stderr)


def checkout_base(ref: str, head_dir: Path) -> tuple[Path, Callable[[], None]]:
    """The merge base of REF and HEAD in a temporary git worktree, at the same place inside
    the repository as ``head_dir`` (the benchmark may live in a subdirectory)."""
    sha = git_value(["merge-base", ref, "HEAD"], head_dir)
    if sha is None:
        raise BenchError(f"--base-ref {ref}: no merge base of {ref} and HEAD in {head_dir} "
                         "(not a git checkout, an unknown ref, or a shallow clone: fetch the "
                         "history, e.g. actions/checkout with fetch-depth: 0)")
    prefix = git_value(["rev-parse", "--show-prefix"], head_dir) or ""
    tmp = Path(tempfile.mkdtemp(prefix="greenops-base-"))
    tree = tmp / "base"
    out = subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=head_dir,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BenchError(f"--base-ref {ref}: git worktree add failed: {out.stderr.strip()}")

    def remove() -> None:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=head_dir,
                       capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)

    return tree / prefix, remove


def _main(args: argparse.Namespace, cleanup: list[Callable[[], None]]) -> int:
    command = list(args.bench_command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise BenchError("no benchmark command: put it after --, e.g. -- python bench.py")
    if args.repeat < 1 or args.warmup < 0 or args.repeat_step < 1:
        raise BenchError("--repeat and --repeat-step must be at least 1, --warmup at least 0")
    if args.count is not None and args.count <= 0:
        raise BenchError("--count must be a positive number of inferences")
    tols = tolerances(args.tolerance)
    gated = [gate.PRIMARY]
    for key in args.gate:
        if key not in gate.KPI_BY_KEY:
            raise BenchError(f"--gate {key}: one of {', '.join(gate.KPI_BY_KEY)}")
        if key not in gated:
            gated.append(key)
    server_url = args.server or os.environ.get("GREENOPS_SERVER")
    token = args.token or os.environ.get("GREENOPS_API_TOKEN") or os.environ.get("GREENOPS_TOKEN")
    server = Server(server_url, token) if server_url and token else None
    if args.baseline_branch and server is None:
        raise BenchError("--baseline-branch reads the server's history: give --server and a "
                         "token ($GREENOPS_API_TOKEN), or use --baseline FILE")
    spool = BenchSpool(Path(args.spool_dir) if args.spool_dir else BenchSpool.default())
    if server is not None and not args.no_post and (n := spool.flush(server, warn)):
        print(f"bench: sent {n} spooled run(s) from {spool.directory}", file=sys.stderr)
    head_dir = Path.cwd()
    base_dir = Path(args.base_dir).resolve() if args.base_dir else None
    if base_dir is not None and not base_dir.is_dir():
        raise BenchError(f"--base-dir {base_dir}: no such directory")
    fallback_note = ""
    asked = bool(base_dir or args.base_ref or args.baseline or args.baseline_branch)
    try:
        source = open_source(args)
    except BenchError as exc:
        if not asked:
            raise
        return no_gpu_verdict(str(exc), args)
    try:
        all_gpus = [g.index for g in source.gpus()]
        if not all_gpus:
            if asked:
                return no_gpu_verdict("NVML found no GPUs on this runner", args)
            raise BenchError("NVML found no GPUs; use --simulate N (never gated on)")
        if args.base_ref:
            try:
                base_dir, remove = checkout_base(args.base_ref, head_dir)
                cleanup.append(remove)
            except BenchError as exc:
                if not (args.baseline or args.baseline_branch):
                    raise
                fallback_note = (f"Interleaving was impossible ({exc}): compared with the "
                                 "stored baseline instead.")
                warn(fallback_note)
        gpus = all_gpus
        if args.gpus:
            try:
                gpus = [int(x) for x in args.gpus.split(",")]
            except ValueError:
                raise BenchError(f"--gpus {args.gpus}: expected indexes like 0,1") from None
            if unknown := sorted(set(gpus) - set(all_gpus)):
                raise BenchError(f"--gpus: no GPU {unknown[0]} (this host has {all_gpus})")
        settings = Settings(command, gpus, args.count,
                            Path(args.count_from) if args.count_from else None, args.pue,
                            args.grid_intensity, args.usd_per_hour)
        host_energy = open_host_energy(args)

        def log(line: str) -> None:
            print(f"bench: {line}", file=sys.stderr)

        samples = measure(settings, source, host_energy, args.repeat, args.warmup, head_dir,
                          base_dir, log=log)
        doc = build_doc(args, settings, source, host_energy, samples, head_dir, base_dir)
        comparison = None
        if base_dir is not None:
            baseline = Baseline(merge_base_description(doc["base_commit"], base_dir),
                                commit=doc["base_commit"] or "", interleaved=True)
            pairs = args.repeat
            while True:
                baseline.samples = [s for s in samples if s["role"] == "base"]
                comparison = gate_run(doc, baseline, tols, args.alpha, gated)
                if pairs >= args.max_repeat or not gate.wants_more_pairs(comparison):
                    break
                more = min(args.repeat_step, args.max_repeat - pairs)
                log(f"undecided after {pairs} pairs ({comparison.reason}): {more} more")
                samples += measure(settings, source, host_energy, more, 0, head_dir, base_dir,
                                   log=log, first=pairs)
                pairs += more
            doc["settings"]["repeat"] = pairs
    finally:
        source.close()
    if comparison is None and args.baseline:
        comparison = gate_run(doc, baseline_from_file(Path(args.baseline)), tols, args.alpha,
                              gated)
    elif comparison is None and args.baseline_branch:
        assert server is not None
        baseline = server.baseline(args.workload, args.baseline_branch, doc["hardware_key"])
        comparison = gate_run(doc, baseline, tols, args.alpha, gated)
        doc["baseline_commit"] = baseline.commit or None
    if comparison is not None:
        if fallback_note:
            comparison.notes.insert(0, fallback_note)
        doc["comparison"] = comparison.as_dict()
    upload_note = ""
    if server is not None and not args.no_post:
        try:
            answer = server.post_run(doc)
            print(f"run stored: {answer.get('url', answer.get('id'))}", file=sys.stderr)
        except UploadRefused as exc:
            upload_note = f"Not stored on the server: {exc}."
            warn(f"{exc}; the verdict stands")
        except BenchError as exc:
            path = spool.put(doc)
            upload_note = (f"Not stored on the server yet ({exc}): spooled as {path}, sent by "
                           "the next run on this runner.")
            warn(f"{exc}; spooled as {path}; the verdict stands")
    if comparison is not None:
        if upload_note:
            comparison.notes.append(upload_note)
        print(gate.render_text(comparison))
        if args.report:
            Path(args.report).write_text(gate.render_markdown(comparison))
    else:
        print(summary_text(doc))
    if args.output:
        Path(args.output).write_text(json.dumps(doc, indent=1))
    if comparison is None:
        return 0
    if comparison.verdict == gate.INCONCLUSIVE and args.allow_inconclusive:
        return 0
    return comparison.exit_code


def no_gpu_verdict(reason: str, args: argparse.Namespace) -> int:
    """A gate was asked on a runner without usable GPUs: its own verdict and exit code (4),
    printed and in the report, never a pass -- --allow-inconclusive does not cover it, since
    a gate that never measures would pass every change. Nothing is run or posted."""
    comparison = gate.all_inconclusive(f"no GPU on this runner: {reason}; nothing was "
                                       "measured or gated", "not read (nothing measured)",
                                       args.alpha, verdict=gate.NO_GPU)
    print(gate.render_text(comparison))
    if args.report:
        Path(args.report).write_text(gate.render_markdown(comparison))
    return EXIT_NO_GPU


def summary_text(doc: dict) -> str:
    head = [s for s in doc["samples"] if s["role"] == "head"]
    lines = [f"GreenOps benchmark of {doc['workload']} ({len(head)} repeats, "
             f"{doc['hardware_key']}){' SIMULATED' if doc['source'] == 'simulated' else ''}",
             "no baseline asked (--base-dir, --base-ref, --baseline or --baseline-branch): "
             "not gated"]
    for kpi in gate.KPIS:
        values = [s[kpi.key] for s in head if s.get(kpi.key) is not None]
        value = "unknown" if len(values) < len(head) or not values \
            else f"{gate.median(values):,.{kpi.digits}f} {kpi.unit} (median)"
        lines.append(f"  {kpi.label}: {value}")
    return "\n".join(lines)
