"""Helpers shared by the server-side benchmarks (bench/ingest, bench/dashboard).

Each benchmark owns a throwaway PostgreSQL database (dropped and re-created on every run) and
whatever processes it starts; `Services` kills them, process group and all, on any exit,
Ctrl-C included. Everything listens on loopback only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def recreate_database(server_url: str, name: str) -> str:
    """Drop and create `name` on the server; return its URL. Refuses names that are not
    obviously benchmark databases, so a typo cannot drop real data."""
    if "bench" not in name:
        raise SystemExit(f"refusing to drop {name!r}: a benchmark database name contains 'bench'")
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server_url}/{name}"


def setup_django(database_url: str, redis_url: str = "") -> None:
    """Point settings at the benchmark database (before Django reads them) and migrate it."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "greenops.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Services:
    """Child processes started in their own process groups and always stopped on exit."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Path:
        log = self.log_dir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                list(argv), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.procs.append((name, proc))
        return log

    def pids(self, name: str) -> list[int]:
        return [pid for n, proc in self.procs if n == name for pid in group_pids(proc.pid)]

    def main_pid(self, name: str) -> int:
        """The pid of the process started as `name` (the web server's or Celery's master)."""
        return next(proc.pid for n, proc in self.procs if n == name)

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                log = (self.log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log}")

    def stop(self) -> None:
        # SIGTERM the whole group (the web server and Celery fork workers), then SIGKILL stragglers.
        for _, proc in self.procs:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        self.procs.clear()

    def __enter__(self) -> Services:
        # Turn SIGTERM into an exception too, so `finally`/`__exit__` run on `kill`, not only ^C.
        signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def wait_for(predicate, timeout_s: float, what: str, services: Services | None = None,
              every_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if services is not None:
            services.check_alive()
        if predicate():
            return
        time.sleep(every_s)
    raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")


def wait_idle(groups: dict[str, Callable[[], list[int]]], services: Services | None = None,
              below_s: float = 0.02, every_s: float = 0.5, timeout_s: float = 60) -> bool:
    """Wait until the processes of `groups` use less than `below_s` CPU seconds in `every_s`
    (a process importing code or finishing a task would otherwise count in what comes next).
    False if they were still busy after `timeout_s`."""
    def total() -> float:
        return sum(cpu_s(pids()) for pids in groups.values())

    deadline = time.monotonic() + timeout_s
    before = total()
    while time.monotonic() < deadline:
        time.sleep(every_s)
        if services is not None:
            services.check_alive()
        now = total()
        if now - before < below_s:
            return True
        before = now
    return False


def cpu_s(pids) -> float:
    """User + system CPU seconds used so far by these processes (Linux /proc; gone = 0).

    The machines these run on are small and shared, so wall-clock rates swing with whatever
    else runs; CPU seconds per row is the steadier figure to compare paths by."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def group_pids(pgid: int) -> list[int]:
    """Every live process in a process group (the web server's or Celery's master, its workers)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid:
                pids.append(int(entry))
    return pids


def backend_pids(conn, database: str, clients: Callable[[], set[int]] | None = None,
                 others: Callable[[], set[int]] | None = None) -> list[int]:
    """PostgreSQL server processes serving `database`, except the one asking (server and
    benchmark share a machine, so their CPU time is readable from /proc). `clients`: only those
    whose client's TCP port is one of these; `others`: only those whose client's port is not."""
    rows = conn.execute("SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s "
                        "AND pid <> pg_backend_pid()", (database,)).fetchall()
    conn.commit()
    keep, drop = (clients() if clients else None), (others() if others else set())
    return [pid for pid, port in rows
            if (keep is None or port in keep) and port not in drop]


def socket_ports(pids: Sequence[int]) -> set[int]:
    """The local TCP ports of the sockets these processes hold (/proc/<pid>/fd against
    /proc/net/tcp and tcp6): which PostgreSQL backends serve which of the server's processes."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class Meter:
    """Wall-clock and CPU seconds over a block: CPU per named group of processes (each group's
    pids read at both ends; a process that appears in between counts from zero, one that exits
    before the end is lost) plus, if `include_self`, this process's own (as group "self")."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]],
                 include_self: bool = True) -> None:
        self._groups = groups
        self._include_self = include_self
        self.wall_s = self.cpu_s = 0.0
        self.cpu_by_group: dict[str, float] = {}

    def _read(self) -> dict[str, dict[int, float]]:
        return {name: {pid: cpu_s([pid]) for pid in pids()} for name, pids in self._groups.items()}

    def __enter__(self) -> Meter:
        self._before = self._read()
        self._self0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self.t0
        for name, now in self._read().items():
            before = self._before[name]
            self.cpu_by_group[name] = sum(c - before.get(pid, 0.0) for pid, c in now.items())
        if self._include_self:
            self.cpu_by_group["self"] = time.process_time() - self._self0
        self.cpu_s = sum(self.cpu_by_group.values())


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        if n == 0:
            print("  ".join("-" * w for w in widths))
