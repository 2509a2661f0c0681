"""`manage.py demo`: the embedded default with a simulated fleet, live.

Seeds two teams (greenops.demo.seed), then runs the web server, the in-process beat, one live
simulated agent per demo host (greenops.demo.agent, each a child process) and the chat
traffic. Ctrl-C or SIGTERM stops all of them: the agents get SIGTERM and flush their spools.
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.test import Client
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from greenops import embedded_beat
from greenops.demo import seed as demo_seed
from greenops.demo import traffic
from greenops.demo.story import HOSTS, StorySource

AGENT_STOP_TIMEOUT_S = 10.0


def _die_with_parent() -> None:
    """In the agent's child process: Linux sends it SIGTERM if the demo dies without stopping
    it (SIGKILL, a crash), so no simulated agent outlives the demo."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the demo's own shutdown still stops its agents


def start_agents(
    server: str, tokens: dict[str, str], idle_since: float, spool_dir: Path
) -> list[subprocess.Popen]:
    agents = []
    for spec in HOSTS:
        env = dict(os.environ, GREENOPS_TOKEN=tokens[spec.name])
        agents.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "greenops.demo.agent",
                    spec.name,
                    "--server",
                    server,
                    "--spool",
                    str(spool_dir / f"demo-agent-{spec.name}.db"),
                    "--idle-since",
                    str(idle_since),
                ],
                env=env,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        )
    return agents


def stop_agents(agents: list[subprocess.Popen]) -> None:
    for agent in agents:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + AGENT_STOP_TIMEOUT_S
    for agent in agents:
        try:
            agent.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


class Stopper:
    """Ctrl-C (SIGINT) or SIGTERM: the agents are stopped first, while the web server still
    answers, so each sends what its spool holds (its last batch); then the server stops.
    Stopping the server first (runserver's own KeyboardInterrupt) left that batch unsent:
    the agents' flush found no server. The stop runs in a thread because the main thread is
    the server's accept loop."""

    def __init__(self, agents: list[subprocess.Popen], stop: threading.Event) -> None:
        self.agents, self.stop = agents, stop
        self.started = threading.Event()
        self.agents_stopped = threading.Event()

    def __call__(self, signum: int, frame: object) -> None:
        if self.agents_stopped.is_set():
            # The stop thread's interrupt_main() lands here, in the main thread (it calls the
            # SIGINT handler, this one): now runserver may return.
            raise KeyboardInterrupt
        if self.started.is_set():
            return
        self.started.set()
        threading.Thread(target=self._stop_all, name="demo-stop", daemon=True).start()

    def _stop_all(self) -> None:
        self.stop.set()  # the chat traffic sends its last window and ends
        stop_agents(self.agents)
        self.agents_stopped.set()
        _thread.interrupt_main()  # runserver returns on KeyboardInterrupt


class RichProgress(demo_seed.Progress):
    """Seeding's steps as progress bars with an ETA, and one line per finished step (what is
    left on a terminal that is not live: a log, CI)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bars = Progress(
            TextColumn("{task.description:<36}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )

    @contextlib.contextmanager
    def step(self, label: str, total: float, unit: str = ""):
        started = time.monotonic()
        task = self.bars.add_task(label, total=int(total) or 1, unit=unit)
        done = [0.0]

        def advance(n: float) -> None:
            done[0] += n
            self.bars.advance(task, n)

        yield advance
        self.bars.remove_task(task)
        took = time.monotonic() - started
        rate = f"  ({done[0] / took:,.0f} {unit}/s)" if unit and took > 0 and done[0] else ""
        count = f"  {done[0]:,.0f} {unit}" if unit else ""
        self.console.print(
            f"  done  {label:<36}{count:>22}  {took:6.1f} s{rate}", highlight=False, soft_wrap=True
        )


def warm_team_homes(seeded: demo_seed.Seeded) -> None:
    """View each team home once before the server starts. A team home never computes its cost
    and KPI figures in the request when they are slow: it shows the last ones it has, or "being
    computed", and queues their refresh (dashboards/refresh.py). The demo's cache is this
    process's memory (no Redis), empty at each start, so a newcomer's first view said "being
    computed" and only a reload showed the figures. This view queues the refreshes, which run
    in-process when it ends (greenops.queueing), and leaves the figures in the cache the
    server's threads share."""
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username=demo_seed.DEMO_USER))
    for team in seeded.teams.values():
        client.get(f"/teams/{team.slug}/")


class Command(BaseCommand):
    help = (
        "Set up GreenOps on the embedded default with a simulated fleet (three teams, "
        "seven hosts, the previous month and this one of history) and run it with live "
        "simulated agents."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port",
            type=int,
            default=int(os.environ.get("PORT", 8000)),
            help="port of the web server on 127.0.0.1 (default 8000 or $PORT)",
        )
        parser.add_argument(
            "--days",
            type=float,
            default=None,
            help="days of history to backfill on first run (default: the "
            "previous calendar month and this one so far, at least 35)",
        )
        parser.add_argument(
            "--no-serve", action="store_true", help="seed and exit, without web server or agents"
        )

    def handle(self, *args, port: int, days: float | None, no_serve: bool, **options) -> None:
        self.started = time.monotonic()
        if days is not None and days <= 0:
            self.stderr.write("--days must be positive")
            sys.exit(2)
        Path(settings.DATA_DIR).mkdir(parents=True, exist_ok=True)
        # Static files are served from the apps (no collectstatic in the demo); an empty
        # STATIC_ROOT keeps WhiteNoise from warning that it is missing.
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        days = days or demo_seed.history_days(time.time())
        fleet_days = min(days, demo_seed.FLEET_DAYS)
        self.stdout.write(f"Seeding the demo ({days:.1f} days of simulated history on first run)…")
        self.stdout.flush()
        progress = RichProgress(Console(file=self.stdout._out))
        with progress.bars:  # one live display for all the steps
            seeded = demo_seed.seed(days, progress=progress, fleet_days=fleet_days)
        if not no_serve:
            warm_team_homes(seeded)
        ready_s = time.monotonic() - self.started
        url = f"http://127.0.0.1:{port}"
        self.stdout.write(
            self.style.SUCCESS(
                f"\nGreenOps demo is ready in {ready_s:.0f} s: {url}/\n"
                f"  login: {demo_seed.DEMO_USER} / {demo_seed.DEMO_PASSWORD}"
                " (owner of all three teams);"
                f" {demo_seed.VIEWER_USER} / {demo_seed.DEMO_PASSWORD} (viewer of ML Platform)\n"
                f"  teams: {url}/teams/ml-platform/  {url}/teams/research/"
                f"  {url}/teams/inference/ (mixed accelerators)\n"
                f"  alert e-mail: written to {Path(settings.DATA_DIR) / demo_seed.DEMO_MAIL_DIR}"
                " (never sent)\n"
                f"  data: simulated ({len(HOSTS)} hosts with live simulated agents;"
                f" history {'backfilled now' if seeded.backfilled else 'from an earlier run'})\n"
                f"  database: {settings.DATABASES['default']['NAME']}\n"
                f"  stop: Ctrl-C (or SIGTERM); reset: delete the database file above and rerun\n"
            )
        )
        if no_serve:
            return
        self.serve(port, seeded)

    def serve(self, port: int, seeded: demo_seed.Seeded) -> None:
        server = f"http://127.0.0.1:{port}"
        stop = threading.Event()
        agents = start_agents(
            server, seeded.host_tokens, seeded.idle_since, Path(settings.DATA_DIR)
        )
        stopper = Stopper(agents, stop)
        previous = {s: signal.signal(s, stopper) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            embedded_beat.start(stop)  # rollups, KPI and price tasks, as beat would run them
            # The live agents take seconds to start: the history is joined up to each one's
            # first minute as it arrives (beat's KPI lookback then recomputes those hours).
            threading.Thread(
                target=demo_seed.join_live,
                args=(seeded.histories, stop.is_set),
                name="demo-join",
                daemon=True,
            ).start()
            serving = next(h for h in HOSTS if h.story == "serving")
            traffic.start(
                server,
                seeded.api_token,
                StorySource(serving, time.time, seeded.idle_since),
                stop,
                seeded.chat_until or time.time(),
            )
            call_command("runserver", f"127.0.0.1:{port}", use_reloader=False)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            stop_agents(agents)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.stdout.write("Demo stopped: web server, beat and simulated agents.")
