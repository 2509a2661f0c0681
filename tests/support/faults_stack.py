"""A whole GreenOps of its own for the fault tests: PostgreSQL, Redis, the web (Granian), a Celery
worker and agents, each a real process on a free port, so that any of them can be stopped, killed or
restarted without touching the shared services (127.0.0.1:5432 and :6379 stay up).

PostgreSQL is a fresh cluster (initdb into a temporary directory, as the postgres user when the
tests run as root, since initdb refuses root); its database is a pg_dump of pytest's already
migrated test database, which is seconds instead of half a minute of migrations. Every wait is
bounded: a fault test that would hang fails with the name of what it waited for.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.support.agent_fakes import free_port

ROOT = Path(__file__).resolve().parents[2]  # the repository


def pg_bin() -> Path | None:
    """The newest PostgreSQL server binaries installed (Debian: /usr/lib/postgresql/N/bin)."""
    base = Path("/usr/lib/postgresql")
    versions = sorted((p for p in base.glob("*/bin") if (p / "initdb").exists()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return versions[-1] if versions else None


def wait_for(what: str, predicate: Callable[[], object], timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # not up yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


class Postgres:
    def __init__(self, root: Path, bin_dir: Path) -> None:
        self.dir = root / "pg"
        self.bin = bin_dir
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0

    def _run(self, *args: str, timeout: float = 60) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, timeout=timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def init(self) -> None:
        self.dir.mkdir(mode=0o700)
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
            shutil.chown(self.dir.parent, "postgres")
        self._run("initdb", "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync")
        self.start()

    def start(self) -> None:
        # fsync off: these tests restart the server cleanly, they do not cut its power.
        # client_connection_check_interval: a backend whose client was SIGKILLed while it waited
        # on a lock notices within 0.2 s, as a real deployment's TCP keepalive would later.
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off "
                "-c client_connection_check_interval=200")
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-w",
                  "-t", "30", "-o", opts, "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "-t", "30", "stop")

    def url(self, db: str = "greenops") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def copy_database(self, source_url: str, db: str = "greenops") -> None:
        """The source database, schema and rows, as ``db`` in this cluster."""
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
        dump = subprocess.run([str(self.bin / "pg_dump"), "-Fc", "-d", source_url],
                              check=True, capture_output=True, timeout=60).stdout
        subprocess.run([str(self.bin / "pg_restore"), "--no-owner", "-d", self.url(db)],
                       input=dump, check=True, capture_output=True, timeout=60)

    def connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self.url(), autocommit=True, connect_timeout=5)
        conn.execute("SET TIME ZONE 'UTC'")
        return conn


class Redis:
    def __init__(self, root: Path) -> None:
        self.dir = root
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("redis", self.ping, 10)

    def ping(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        out = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() == "PONG"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class Service:
    """A Python process of GreenOps (the web or a Celery worker) in a session of its own."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Signal the whole process group (a worker's pool processes too) and wait."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if sig == signal.SIGKILL:  # pool processes are in the group: make sure they are gone
            wait_for(f"{self.name}'s processes to go", lambda: not _group_alive(self.proc.pid), 10)

    def pids(self) -> list[int]:
        """The processes of the group (the web's workers, the worker's pool)."""
        out = subprocess.run(["pgrep", "-g", str(self.proc.pid)], capture_output=True,
                             text=True, timeout=5).stdout
        return [int(p) for p in out.split()]

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Stack:
    """PostgreSQL + Redis + the web + a Celery worker; agents are started per test."""

    def __init__(self, root: Path, bin_dir: Path) -> None:
        self.root = root
        self.pg = Postgres(root, bin_dir)
        self.redis = Redis(root)
        self.agents: list[Agent] = []  # every agent a test started, killed by close()
        self.web_port = free_port()
        # Not PGOPTIONS (tests/services.py: no waiting for commits to reach the disk): these
        # processes' commits must be as durable as in production for the faults to test them.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GREENOPS_", "CELERY_")) and k != "PGOPTIONS"}
        self.env = dict(
            env, DATABASE_URL=self.pg.url(), REDIS_URL=self.redis.url,
            CELERY_TASK_ALWAYS_EAGER="false", SECRET_KEY="fault-tests", LOG_LEVEL="WARNING",
            GREENOPS_DATA_DIR=str(root), GREENOPS_METADATA_URL="off", DB_CONN_MAX_AGE="60",
        )
        # greenops.webserver (Granian, keep-alive), as docker-compose.yml and the image run it:
        # the agent keeps its connection between batches, so a stopped or restarted web process
        # meets kept connections here as it does in production.
        self.web = Service("web", [sys.executable, "-m", "greenops.webserver"], dict(
            self.env, WEB_BIND=f"127.0.0.1:{self.web_port}", WEB_CONCURRENCY="1",
            WEB_THREADS="4", WEB_LOG_LEVEL="warning"), root / "web.log")
        self.worker = Service("celery worker", [
            sys.executable, "-m", "celery", "-A", "greenops", "worker", "-c", "2",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING",
        ], self.env, root / "worker.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def start_web(self) -> None:
        self.web.start()
        wait_for("the web to answer /healthz", self._healthy, 60, step=0.2)

    def ensure_up(self) -> None:
        if self.pg_down():
            self.pg.start()
        if not self.redis.ping():
            self.redis.start()
        if self.worker.proc is None or self.worker.proc.poll() is not None:
            self.worker.start()
        if self.web.proc is None or self.web.proc.poll() is not None:
            self.start_web()

    def pg_down(self) -> bool:
        try:
            self.pg.connect().close()
        except psycopg.OperationalError:
            return True
        return False

    def _healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
            return resp.status == 200

    def catch_up(self) -> None:
        """What beat's ingest-catch-up does every minute, now: queue process_pending_batches
        (for every pending batch, not only those older than a minute) to the real worker."""
        from celery import Celery

        # Not the current app: shared tasks of later tests in this process must not find it.
        app = Celery(broker=self.redis.url, set_as_current=False)
        try:
            app.send_task("greenops.telemetry.tasks.process_pending_batches",
                          kwargs={"older_than_s": 0}, queue="ingest")
        finally:
            app.close()

    def close(self) -> None:
        # Nothing is left to finish: kill rather than wait for graceful stops.
        # An agent a failed test left running would sample and post on past the run.
        for agent in self.agents:
            if agent.proc is not None and agent.proc.poll() is None:
                agent.kill()
        for step in (lambda: self.web.stop(signal.SIGKILL),
                     lambda: self.worker.stop(signal.SIGKILL), self.redis.stop, self.pg.stop):
            try:
                step()
            except Exception:  # tear down the rest whatever one of them did
                pass


def request_in_flight(port: int) -> bool:
    """A request sits unread in a connection to `port` (its web process is stopped): the bytes
    an agent sent that nobody has answered. An established connection alone says nothing: the
    agent keeps one open between batches (keep-alive). From /proc/net/tcp: the server end's
    receive queue, of connections accepted or still in the listen backlog alike."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if (int(local.rsplit(":", 1)[1], 16) == port and state == "01"  # ESTABLISHED
                and int(queues.split(":")[1], 16) > 0):
            return True
    return False


class Agent:
    """`greenops-agent run` over fake NVML GPUs whose counter follows the wall clock at 250 W
    (the fake's power reading), logging every reading it makes (the truth to count against)."""

    GPUS = 3
    INTERVAL_S = 0.1

    def __init__(self, stack: Stack, token: str, root: Path) -> None:
        self.stack, self.token, self.root = stack, token, root
        self.runs = 0
        self.proc: subprocess.Popen | None = None
        stack.agents.append(self)
        root.mkdir(exist_ok=True)
        (root / "agent.toml").write_text(
            'backoff_base = 0.2\nbackoff_cap = 1.0\nhost_energy = "off"\n')

    def start(self) -> None:
        self.runs += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
        env.update(AGENT_FAKES_GPUS=str(self.GPUS), AGENT_FAKES_ENERGY_W="250",
                   AGENT_FAKES_READ_LOG=str(self.read_log(self.runs)), GREENOPS_TOKEN=self.token,
                   GREENOPS_METADATA_URL="off")
        with open(self.root / f"agent-{self.runs}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "collectors.cli", "run", "--server", self.stack.url,
                 "--config", str(self.root / "agent.toml"),
                 "--nvml-lib", "tests.support.agent_fakes",
                 "--spool", str(self.root / "spool.db"), "--interval", str(self.INTERVAL_S),
                 "--batch-seconds", "0.5", "--request-timeout", "5", "--flush-timeout", "5"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
        wait_for("the agent's first reading", lambda: self.reads(self.runs), 30)

    def read_log(self, run: int) -> Path:
        return self.root / f"reads-{run}.log"

    def reads(self, run: int) -> Counter:
        """GPU index -> readings the fake NVML answered in that run."""
        path = self.read_log(run)
        return Counter(int(line) for line in path.read_text().split()) if path.exists() \
            else Counter()

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(20)
        log = (self.root / f"agent-{self.runs}.log").read_text(errors="replace")
        assert self.proc.returncode == 0, log
        return log

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted(self.root.glob("agent-*.log")))


# --- what the database holds ------------------------------------------------------------------

ROLLUP_COLUMNS = {  # rollup column -> the same figure recomputed from raw samples
    "samples": "count(*)",
    "util_sum": "coalesce(sum(util_pct), 0)",
    "util_n": "count(util_pct)",
    "power_sum_w": "coalesce(sum(power_w), 0)",
    "power_n": "count(power_w)",
    "energy_j": "coalesce(sum(energy_j), 0)",
}


def samples_per_gpu(conn: psycopg.Connection, host_id: int) -> dict[int, int]:
    rows = conn.execute(
        "SELECT g.index, count(*), count(DISTINCT s.ts) FROM telemetry_gpusample s "
        "JOIN telemetry_gpu g ON g.id = s.gpu_id WHERE g.host_id = %s GROUP BY g.index",
        [host_id]).fetchall()
    for index, n, distinct in rows:
        assert n == distinct, f"GPU {index}: {n} samples but {distinct} timestamps"
    return {index: n for index, n, _ in rows}


def pending_batches(conn: psycopg.Connection, host_id: int) -> int:
    return conn.execute("SELECT count(*) FROM telemetry_ingestbatch WHERE host_id = %s "
                        "AND status = 'pending'", [host_id]).fetchone()[0]


def rollup_mismatches(conn: psycopg.Connection, host_id: int) -> list[tuple]:
    """Every (rollup, GPU, bucket) whose figures differ from sums recomputed from raw samples,
    including buckets present on one side only; [] when the rollups are exact."""
    bad: list[tuple] = []
    cols = list(ROLLUP_COLUMNS)
    for table, unit in (("telemetry_gpuminute", "minute"), ("telemetry_gpuhour", "hour"),
                        ("telemetry_gpuday", "day")):
        raw = conn.execute(
            f"SELECT s.gpu_id, date_trunc('{unit}', s.ts), "
            + ", ".join(ROLLUP_COLUMNS.values())
            + " FROM telemetry_gpusample s JOIN telemetry_gpu g ON g.id = s.gpu_id "
            "WHERE g.host_id = %s GROUP BY 1, 2", [host_id]).fetchall()
        rolled = conn.execute(
            f"SELECT r.gpu_id, r.bucket, {', '.join('r.' + c for c in cols)} FROM {table} r "
            "JOIN telemetry_gpu g ON g.id = r.gpu_id WHERE g.host_id = %s", [host_id]).fetchall()
        want = {(r[0], r[1]): r[2:] for r in raw}
        have = {(r[0], r[1]): r[2:] for r in rolled}
        for key in want.keys() | have.keys():
            a, b = want.get(key), have.get(key)
            if a is None or b is None or any(
                    abs(float(x) - float(y)) > 1e-6 * max(1.0, abs(float(x)))
                    for x, y in zip(a, b, strict=True)):
                bad.append((table, *key, dict(zip(cols, a or (), strict=False)),
                            dict(zip(cols, b or (), strict=False))))
    return bad


def samples_of(conn: psycopg.Connection, host_id: int) -> list[tuple]:
    """(gpu index, ts in Unix seconds, energy_mj, energy_j, energy_method), in time order."""
    return conn.execute(
        "SELECT g.index, extract(epoch FROM s.ts)::float8, s.energy_mj, s.energy_j, "
        "s.energy_method FROM telemetry_gpusample s JOIN telemetry_gpu g ON g.id = s.gpu_id "
        "WHERE g.host_id = %s ORDER BY g.index, s.ts", [host_id]).fetchall()


def dump(obj: object) -> str:
    return json.dumps(obj, default=str, indent=1)[:4000]
