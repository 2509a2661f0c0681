"""Test doubles for the host agent: a fake pynvml and a fake GreenOps ingest server.

``FakeNvml`` is passed to ``NvmlSource(lib=...)`` in-process. This module also works as an
``--nvml-lib tests.support.agent_fakes`` for a real agent subprocess: its module-level names are
those of a ``FakeNvml`` configured from environment variables (AGENT_FAKES_GPUS,
AGENT_FAKES_ENERGY_STEP_MJ, AGENT_FAKES_INIT_ERROR, AGENT_FAKES_ENERGY_W, AGENT_FAKES_READ_LOG),
so no ``sys.modules`` patching is needed anywhere.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1

_MESSAGES = {
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


class FakeNvml:
    """The pynvml function names over scripted GPUs. Counts every call, for assertions."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES

    def __init__(
        self,
        n: int = 2,
        unsupported: set[str] | None = None,
        bytes_strings: bool = False,
        init_error: int | None = None,
        power_mw: int = 250_000,
        energy_step_mj: int = 1000,
        profile: dict[str, Any] | None = None,
        uuids: list[str] | None = None,
        energy_w: float | None = None,
        read_log: str | None = None,
        nvlink_kib_per_read: tuple[int, int] | None = None,
        processes: dict[int, list[tuple[int, int | None]]] | None = None,
    ) -> None:
        # NVLink: None is a board without it (the fields answer NOT_SUPPORTED, as on a PCIe
        # card); else each read adds (tx, rx) KiB to the cumulative counters.
        self.nvlink_kib_per_read = nvlink_kib_per_read
        self.nvlink_kib = [[0, 0] for _ in range(n)]
        self.processes = processes or {}  # index -> [(pid, usedGpuMemory bytes or None)]
        self.n = n
        self.uuids = uuids  # per index; default: GPU-00000000-fake-0000-0000-<index>
        # A counter that follows the wall clock at a constant power: the same counter for every
        # process on the host, as NVML's is, so it runs on across an agent restart.
        self.energy_w = energy_w
        # One line ("<gpu index>") per energy reading, appended as it is made: the truth of how
        # many samples the agent took, for a process that is then killed (fault tests).
        self._read_log = os.open(read_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND) \
            if read_log else None
        self.unsupported = unsupported or set()  # function names that raise NOT_SUPPORTED
        self.bytes_strings = bytes_strings
        self.init_error = init_error
        self.power_mw = power_mw
        self.energy_step_mj = energy_step_mj
        # A bottleneck profile: what the utilization, clock, PCIe and throttle calls answer.
        self.profile = {"gpu": 87, "memory": 40, "mem_clock": 1215, "pcie_tx_kb": 2048,
                        "pcie_rx_kb": 8192, "throttle": 0x0, "enforced_mw": 400_000,
                        **(profile or {})}
        self.energy_mj = [10_000_000 * (i + 1) for i in range(n)]
        self.calls: dict[str, int] = {}
        self.initialised = False
        self.shut_down = False

    def _hit(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def _str(self, text: str) -> str | bytes:
        return text.encode() if self.bytes_strings else text

    def nvmlInit(self) -> None:
        self._hit("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._hit("nvmlShutdown")
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        self._hit("nvmlDeviceGetCount")
        return self.n

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._hit("nvmlDeviceGetHandleByIndex")
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str | bytes:
        self._hit("nvmlDeviceGetUUID")
        if self.uuids is not None:
            return self._str(self.uuids[handle])
        return self._str(f"GPU-00000000-fake-0000-0000-{handle:012d}")

    def nvmlDeviceGetName(self, handle: int) -> str | bytes:
        self._hit("nvmlDeviceGetName")
        return self._str("Fake NVIDIA A100-SXM4-40GB")

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        self._hit("nvmlDeviceGetPowerManagementLimit")
        return 400_000  # mW

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        self._hit("nvmlDeviceGetMemoryInfo")
        total = 40960 * 1024 * 1024
        return SimpleNamespace(total=total, used=1024 * 1024 * 1024, free=total - 1024**3)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        self._hit("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=self.profile["gpu"], memory=self.profile["memory"])

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        self._hit("nvmlDeviceGetPowerUsage")
        return self.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self._hit("nvmlDeviceGetTotalEnergyConsumption")
        if self._read_log is not None:
            os.write(self._read_log, b"%d\n" % handle)
        if self.energy_w is not None:
            return int(time.time() * self.energy_w * 1000) + self.energy_mj[handle]
        self.energy_mj[handle] += self.energy_step_mj
        return self.energy_mj[handle]

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        self._hit("nvmlDeviceGetTemperature")
        assert sensor == NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        self._hit("nvmlDeviceGetClockInfo")
        assert clock in (NVML_CLOCK_SM, NVML_CLOCK_MEM)
        return 1410 if clock == NVML_CLOCK_SM else self.profile["mem_clock"]

    def nvmlDeviceGetFieldValues(self, handle: int, field_ids: list) -> list:
        """Like pynvml's: (fieldId, scopeId) pairs in, one nvmlFieldValue_t-like object each."""
        self._hit("nvmlDeviceGetFieldValues")
        out = []
        for field_id, scope in field_ids:
            assert field_id in (138, 139) and scope == 0xFFFFFFFF  # DATA_TX/RX, all links
            if self.nvlink_kib_per_read is None:
                out.append(SimpleNamespace(fieldId=field_id, nvmlReturn=NVML_ERROR_NOT_SUPPORTED,
                                           valueType=3, value=SimpleNamespace(ullVal=0)))
                continue
            d = field_id - 138
            self.nvlink_kib[handle][d] += self.nvlink_kib_per_read[d]
            out.append(SimpleNamespace(fieldId=field_id, nvmlReturn=NVML_SUCCESS, valueType=3,
                                       value=SimpleNamespace(ullVal=self.nvlink_kib[handle][d])))
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list:
        self._hit("nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used)
                for pid, used in self.processes.get(handle, [])]

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        self._hit("nvmlDeviceGetMaxClockInfo")
        assert clock in (NVML_CLOCK_SM, NVML_CLOCK_MEM)
        return 1410 if clock == NVML_CLOCK_SM else 1215  # an A100-SXM4's maximums

    def nvmlDeviceGetPcieThroughput(self, handle: int, counter: int) -> int:
        self._hit("nvmlDeviceGetPcieThroughput")
        return self.profile["pcie_tx_kb" if counter == NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kb"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        self._hit("nvmlDeviceGetCurrentClocksThrottleReasons")
        return self.profile["throttle"]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        self._hit("nvmlDeviceGetEnforcedPowerLimit")
        return self.profile["enforced_mw"]


_module_fake: FakeNvml | None = None


def __getattr__(name: str) -> Any:
    """Module-level pynvml names, so ``--nvml-lib tests.support.agent_fakes`` works in a
    subprocess."""
    global _module_fake
    if name.startswith("nvml"):
        if _module_fake is None:
            init_error = os.environ.get("AGENT_FAKES_INIT_ERROR")
            energy_w = os.environ.get("AGENT_FAKES_ENERGY_W")
            _module_fake = FakeNvml(
                n=int(os.environ.get("AGENT_FAKES_GPUS", "2")),
                energy_step_mj=int(os.environ.get("AGENT_FAKES_ENERGY_STEP_MJ", "1000")),
                init_error=int(init_error) if init_error else None,
                energy_w=float(energy_w) if energy_w else None,
                read_log=os.environ.get("AGENT_FAKES_READ_LOG") or None,
            )
        return getattr(_module_fake, name)
    raise AttributeError(name)


# --- a fake GreenOps ingest server ------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    raw: bytes
    doc: Any


@dataclass
class FakeServer:
    """A real HTTP server on 127.0.0.1 that records requests and answers from a script.

    ``script`` is a list of (status, headers, body) answers consumed one per samples POST;
    once it is empty every batch gets 202. Duplicate batch ids are answered "duplicate", as
    the real server does, and counted, so tests can assert exactly-once delivery.

    ``keep_alive``: answer in HTTP/1.1 and keep each connection for the next request, as
    the real web server (Granian) does (``connections`` counts those accepted); ``stop`` then
    closes the kept ones too, as a server that goes away does. Otherwise HTTP/1.0, a
    connection per request.
    """

    port: int = 0
    script: list[tuple[int, dict[str, str], dict]] = field(default_factory=list)
    inventory_status: int = 200
    requests: list[Received] = field(default_factory=list)
    accepted: list[dict] = field(default_factory=list)  # batch documents answered 202 queued
    host_samples: list[dict] = field(default_factory=list)  # POST /api/v1/host-samples docs
    duplicates: int = 0
    keep_alive: bool = False
    connections: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._open: set = set()  # sockets of the connections being served

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeServer:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if fake.keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake.connections += 1
                    fake._open.add(self.connection)

            def finish(self) -> None:
                with fake._lock:
                    fake._open.discard(self.connection)
                super().finish()

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, headers, body = fake.handle(self.path, dict(self.headers), raw)
                data = json.dumps(body).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
            with self._lock:  # kept connections end with the server, as a real one's do
                for sock in list(self._open):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def handle(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict, dict]:
        with self._lock:
            if headers.get("Content-Encoding") == "gzip":
                doc = json.loads(gzip.decompress(raw))
            else:
                doc = json.loads(raw)
            self.requests.append(Received(path, headers, raw, doc))
            if path == "/api/v1/inventory":
                return self.inventory_status, {}, {"status": "registered"}
            if path == "/api/v1/host-samples":  # host activity: not GPU samples
                self.host_samples.append(doc)
                n = len(doc["samples"]["ts"])
                return 200, {}, {"batch_id": doc["batch_id"], "status": "stored", "samples": n,
                                 "inserted": n}
            if self.script:
                return self.script.pop(0)
            batch_id = doc["batch_id"]
            if any(d["batch_id"] == batch_id for d in self.accepted):
                self.duplicates += 1
                status = "duplicate"
            else:
                self.accepted.append(doc)
                status = "queued"
            n = len(doc["samples"]["ts"])
            return 202, {}, {"batch_id": batch_id, "status": status, "samples": n}

    def sample_keys(self) -> list[tuple[int, float]]:
        """(gpu_index, ts) of every accepted sample, in arrival order."""
        keys: list[tuple[int, float]] = []
        for doc in self.accepted:
            s = doc["samples"]
            keys.extend(zip(s["gpu_index"], s["ts"], strict=True))
        return keys

    def inventory_posts(self) -> list[Received]:
        return [r for r in self.requests if r.path == "/api/v1/inventory"]


def free_port() -> int:
    """A port with nothing listening on it (yet): connections to it are refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
