"""A streaming replica of the suite's PostgreSQL for tests/system/test_replica.py, and a web server
that reads from it.

The replica is made as an operator would: pg_basebackup -R -X stream of the running cluster
(127.0.0.1:5432 unless DATABASE_URL says otherwise) into a temporary directory, started with
the same PostgreSQL binaries on a free loopback port (as the postgres user when the tests run
as root, since postgres refuses root). It is a physical copy of the whole cluster, so the test
database pytest made on the primary is there too, under the same name, and every commit the
test makes on the primary streams to it. Replay can be paused and resumed, and the server
stopped, to make lag and outage on demand.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from greenops import webserver
from tests.support.agent_fakes import free_port
from tests.support.faults_stack import Service, pg_bin, wait_for

ROOT = Path(__file__).resolve().parents[2]  # the repository

_SLOT_PREFIX = "greenops_test_replica_"

# Settings a hot standby must hold at least at the primary's values, or it refuses to start.
_AT_LEAST_PRIMARY = (
    "max_connections",
    "max_worker_processes",
    "max_wal_senders",
    "max_prepared_transactions",
    "max_locks_per_transaction",
)


def unavailable() -> str | None:
    """Why a replica cannot be made here, or None."""
    bin_dir = pg_bin()
    if bin_dir is None or not (bin_dir / "pg_basebackup").exists():
        return "pg_basebackup not installed (Debian: postgresql)"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser: postgres refuses to run as root"
    return None


class Replica:
    def __init__(self, primary_url: str) -> None:
        parts = urlsplit(primary_url)
        self.primary_host = parts.hostname or "127.0.0.1"
        self.primary_port = parts.port or 5432
        self.primary_user = parts.username or "postgres"
        self.bin = pg_bin()
        # Not under pytest's tmp_path: its parents are root's alone, where postgres cannot go.
        self.dir = Path(tempfile.mkdtemp(prefix="greenops-replica-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        # A replication slot keeps the primary's WAL until the replica has it: without one, a
        # busy cluster recycled the segments between the base backup and the replica's start
        # ("requested WAL segment ... has already been removed"). Named after this process so
        # that a run that died leaves a slot the next run can recognise and drop.
        self.slot = f"{_SLOT_PREFIX}{os.getpid()}_{self.port}"

    def _run(self, *args: str, timeout: float = 120) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        # A session of its own: on a timeout the whole group goes (runuser cannot pass a KILL
        # on, and a pg_basebackup left running would hold its slot on the primary).
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError(f"{args[0]} took over {timeout:g} s" + self._log_tail()) from None
        if proc.returncode:
            raise AssertionError(
                f"{args[0]} failed ({proc.returncode}): {err.strip()}" + self._log_tail()
            )

    def _log_tail(self) -> str:
        log = self.dir / "log"
        return "\nreplica log:\n" + log.read_text(errors="replace")[-3000:] if log.exists() else ""

    def create(self) -> None:
        """pg_basebackup of the primary (with its WAL and a standby.signal), then start."""
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        primary = psycopg.connect(
            host=self.primary_host,
            port=self.primary_port,
            user=self.primary_user,
            dbname="postgres",
            autocommit=True,
        )
        with primary:
            floors = dict(
                primary.execute(
                    "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                    [list(_AT_LEAST_PRIMARY)],
                ).fetchall()
            )
        self._drop_stale_slots()
        self._run(
            "pg_basebackup",
            "-h",
            self.primary_host,
            "-p",
            str(self.primary_port),
            "-U",
            self.primary_user,
            "-D",
            str(self.data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
            "-C",
            "-S",
            self.slot,
            # The whole cluster is copied: seconds for the suite's own, minutes where other
            # work keeps gigabytes beside it.
            timeout=900,
        )
        # Debian keeps a cluster's configuration in /etc/postgresql, outside the copy; a
        # cluster that kept it inside copied settings (port, paths) meant for the primary.
        # The replica gets its own: trust on its socket and loopback, as the suite's cluster.
        settings = "".join(f"{name} = {value}\n" for name, value in floors.items())
        (self.data / "postgresql.conf").write_text(
            settings + "hot_standby = on\nfsync = off\nlisten_addresses = '127.0.0.1'\n"
        )
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        )
        (self.data / "pg_ident.conf").write_text("")
        if self.as_postgres:
            for path in (
                self.data / "postgresql.conf",
                self.data / "pg_hba.conf",
                self.data / "pg_ident.conf",
            ):
                shutil.chown(path, "postgres")
        self.start()

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -k {self.dir}",
            "start",
        )
        wait_for("the replica to accept connections", lambda: self.connect().close() or True, 30)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, db: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def connect(self, db: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname=db,
            autocommit=True,
            connect_timeout=5,
        )

    def pause_replay(self) -> None:
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            wait_for(
                "replay to pause",
                lambda: (
                    conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] == "paused"
                ),
                10,
            )

    def resume_replay(self) -> None:
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def replayed(self, lsn: str) -> bool:
        with self.connect() as conn:
            return conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn]).fetchone()[
                0
            ]

    def catch_up(self, timeout: float = 60) -> None:
        """Wait until the replica has replayed everything the primary has written so far.

        A physical replica replays the whole cluster's WAL, other databases' too: where other
        work loads the same cluster (benchmarks beside the suite) faster than a loaded machine
        replays it, the wait fails, saying how much WAL the cluster wrote meanwhile."""
        with self._primary() as primary:
            lsn = str(primary.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
        try:
            wait_for(f"the replica to replay up to {lsn}", lambda: self.replayed(lsn), timeout)
        except AssertionError as exc:
            with self._primary() as primary:
                written = primary.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", [lsn]
                ).fetchone()[0]
            raise AssertionError(
                f"{exc}; meanwhile the cluster at {self.primary_host}:{self.primary_port} wrote "
                f"{float(written) / 2**20:.0f} MiB more WAL (all of it replayed here: is other "
                "work loading that cluster?)"
            ) from None

    def _primary(self) -> psycopg.Connection:
        return psycopg.connect(
            host=self.primary_host,
            port=self.primary_port,
            user=self.primary_user,
            dbname="postgres",
            autocommit=True,
        )

    def close(self) -> None:
        if self.running():
            try:
                self.stop()
            except Exception:  # remove it whatever state it is in
                pass
        try:  # the slot would keep the primary's WAL for ever
            with self._primary() as primary:
                primary.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND active_pid IS NOT NULL",
                    [self.slot],
                )
                wait_for(
                    "the replica's slot to be released",
                    lambda: (
                        not primary.execute(
                            "SELECT coalesce(bool_or(active), false) FROM pg_replication_slots "
                            "WHERE slot_name = %s",
                            [self.slot],
                        ).fetchone()[0]
                    ),
                    30,
                )
                primary.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    [self.slot],
                )
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _drop_stale_slots(self) -> None:
        """Slots of earlier runs whose process is gone (killed before its teardown)."""
        with self._primary() as primary:
            rows = primary.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE %s AND NOT active",
                [_SLOT_PREFIX + "%"],
            ).fetchall()
            for (name,) in rows:
                pid = int(name[len(_SLOT_PREFIX) :].split("_")[0])
                if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
                    primary.execute("SELECT pg_drop_replication_slot(%s)", [name])


def web(root: Path, env: dict[str, str], queue: str) -> tuple[Service, str]:
    """The web (greenops.webserver's Granian, one worker of four threads) on a free loopback
    port, serving tests.support.replica_web, whose tasks go to the test worker's `queue`;
    started, answering /healthz. Returns (service, base URL)."""
    port = free_port()
    args = webserver.argv(bind=f"127.0.0.1:{port}", workers=1, threads=4, access_log=False,
                          env={"WEB_LOG_LEVEL": "warning"},
                          app="tests.support.replica_web:application")
    service = Service("web", [webserver.program(), *args],
                      dict(env, GREENOPS_TEST_TASK_QUEUE=queue), root / "web.log")
    service.start()
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if service.proc.poll() is not None:
            raise AssertionError("the web exited:\n" + service.output()[-3000:])
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
            return resp.status == 200

    wait_for("the web to answer /healthz", healthy, 60, step=0.2)
    return service, url
