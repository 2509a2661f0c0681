"""`manage.py demo`: the embedded default with a simulated fleet, live.

Seeds two teams (greenops.demo.seed), then runs the web server, the in-process beat, one live
simulated agent per demo host (greenops.demo.agent, each a child process) and the chat
traffic. Ctrl-C or SIGTERM stops all of them: the agents get SIGTERM and flush their spools.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

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


def start_agents(server: str, tokens: dict[str, str], idle_since: float,
                 spool_dir: Path) -> list[subprocess.Popen]:
    agents = []
    for spec in HOSTS:
        env = dict(os.environ, GREENOPS_TOKEN=tokens[spec.name])
        agents.append(subprocess.Popen(
            [sys.executable, "-m", "greenops.demo.agent", spec.name, "--server", server,
             "--spool", str(spool_dir / f"demo-agent-{spec.name}.db"),
             "--idle-since", str(idle_since)],
            env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None))
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


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    # runserver handles KeyboardInterrupt by returning; SIGTERM's default would kill the
    # process before the finally block that stops the agents.
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = ("Set up GreenOps on the embedded default with a simulated fleet (two teams, three "
            "hosts, 35 days of history) and run it with live simulated agents.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)),
                            help="port of the web server on 127.0.0.1 (default 8000 or $PORT)")
        parser.add_argument("--days", type=float, default=35.0,
                            help="days of history to backfill on first run (default 35)")
        parser.add_argument("--no-serve", action="store_true",
                            help="seed and exit, without web server or agents")

    def handle(self, *args, port: int, days: float, no_serve: bool, **options) -> None:
        if days <= 0:
            self.stderr.write("--days must be positive")
            sys.exit(2)
        Path(settings.DATA_DIR).mkdir(parents=True, exist_ok=True)
        # Static files are served from the apps (no collectstatic in the demo); an empty
        # STATIC_ROOT keeps WhiteNoise from warning that it is missing.
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write(f"Seeding the demo ({days:g} days of simulated history on first run; "
                          "this takes a minute)…")
        seeded = demo_seed.seed(days)
        url = f"http://127.0.0.1:{port}"
        self.stdout.write(self.style.SUCCESS(
            f"\nGreenOps demo is ready: {url}/\n"
            f"  login: {demo_seed.DEMO_USER} / {demo_seed.DEMO_PASSWORD} (owner of both teams);"
            f" {demo_seed.VIEWER_USER} / {demo_seed.DEMO_PASSWORD} (viewer of ML Platform)\n"
            f"  teams: {url}/teams/ml-platform/  {url}/teams/research/\n"
            f"  data: simulated ({len(HOSTS)} hosts with live simulated agents;"
            f" history {'backfilled now' if seeded.backfilled else 'from an earlier run'})\n"
            f"  database: {settings.DATABASES['default']['NAME']}\n"
            f"  stop: Ctrl-C (or SIGTERM); reset: delete the database file above and rerun\n"
        ))
        if no_serve:
            return
        self.serve(port, seeded)

    def serve(self, port: int, seeded: demo_seed.Seeded) -> None:
        server = f"http://127.0.0.1:{port}"
        previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
        stop = threading.Event()
        agents = start_agents(server, seeded.host_tokens, seeded.idle_since,
                              Path(settings.DATA_DIR))
        try:
            embedded_beat.start(stop)  # rollups, KPI and price tasks, as beat would run them
            serving = next(h for h in HOSTS if h.story == "serving")
            traffic.start(server, seeded.api_token,
                          StorySource(serving, time.time, seeded.idle_since), stop, time.time())
            call_command("runserver", f"127.0.0.1:{port}", use_reloader=False)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            stop_agents(agents)
            signal.signal(signal.SIGTERM, previous)
            self.stdout.write("Demo stopped: web server, beat and simulated agents.")
