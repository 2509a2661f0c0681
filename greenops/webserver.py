"""The web server: Granian serving greenops.wsgi, with the options every deployment shares.

`python -m greenops.webserver` is how the image (Dockerfile), docker-compose.yml, the fault
tests' stack and bench/ingest start the web. One definition, so they cannot drift apart.

Why Granian and not gunicorn: at the agent's batch (80 samples per POST, one every 10 s per
host) the web's CPU per request is mostly fixed cost, and gunicorn's (gthread) was parsing HTTP
and handing each request between its poller and thread pool in Python: the web spent 0.86-1.12
ms of CPU per POST behind gunicorn against 0.65-0.71 ms behind Granian, whose HTTP handling is
Rust (bench/ingest, four alternating pairs, docs/capacity.md). The Django application is the same
WSGI callable.

Settings (environment):
  WEB_CONCURRENCY  worker processes (default: one per CPU this process may run on). More
                   processes than cores only add switching: on 2 cores, 2 workers of 4 threads
                   spent 0.51-0.66 ms of web CPU per agent POST against 0.68-0.92 for 4 of 2
                   (bench/ingest, alternating runs, 2026-12-04)
  WEB_THREADS      threads per worker that run the Django application (default 4): a request
                   waiting on PostgreSQL holds one, so the others answer meanwhile
  WEB_BIND         host:port to listen on (default 127.0.0.1:8000; the image sets 0.0.0.0:8000)
  WEB_ACCESS_LOG   "1" to log every request (compose does; the fault tests and bench do not)
  WEB_FORWARDED_ALLOW_IPS
                   the proxies (addresses or networks, comma-separated; "*" for any) whose
                   X-Forwarded-For names the client: a request from one of them gets that
                   client as REMOTE_ADDR (what the login and enrollment limits count), and its
                   X-Forwarded-Proto as its scheme. Empty (default): REMOTE_ADDR is the peer,
                   and nobody can choose the address a limit counts by sending a header.

Keep-alive: Granian keeps an idle client connection until its header-read timeout, set here to
its maximum, 60 s. A proxy in front must close idle upstream connections sooner (nginx:
`keepalive_timeout 50s;` in the upstream block), or a POST it sends on a connection Granian is
closing gets a 502. The agent itself resends once on a connection found closed while idle
(collectors/transport.py), so agents posting directly lose nothing.
"""

from __future__ import annotations

import os
import shutil
import sys

APP = "greenops.wsgi:application"
# Granian's range is 1-60,000 ms; idle keep-alive connections are closed after it too.
HEADER_READ_TIMEOUT_MS = 60_000


def argv(bind: str | None = None, workers: int | None = None, threads: int | None = None,
         access_log: bool | None = None, env: dict | None = None, app: str = APP) -> list[str]:
    """Granian's command line (without the program) for these settings, defaulting to `env`'s
    (os.environ's) WEB_* variables. `app`: the WSGI callable as module:name (a test's wrapper
    of greenops.wsgi)."""
    env = os.environ if env is None else env
    host, _, port = (bind or env.get("WEB_BIND") or "127.0.0.1:8000").rpartition(":")
    workers = workers if workers is not None else int(env.get("WEB_CONCURRENCY") or cpus())
    threads = threads if threads is not None else int(env.get("WEB_THREADS") or 4)
    if access_log is None:
        access_log = env.get("WEB_ACCESS_LOG", "") in ("1", "true", "yes")
    return [
        "--interface", "wsgi", app,
        "--host", host.strip("[]") or "0.0.0.0", "--port", port,
        "--workers", str(workers), "--blocking-threads", str(threads),
        # One Rust thread per worker for its connections: the processes are the parallelism.
        "--runtime-mode", "st", "--runtime-threads", "1",
        # Agents, browsers and proxies speak HTTP/1.1 to it; no websockets are served.
        "--http", "1", "--no-ws",
        "--http1-header-read-timeout", str(HEADER_READ_TIMEOUT_MS),
        # As gunicorn's arbiter did: a worker that dies is replaced.
        "--respawn-failed-workers",
        "--workers-kill-timeout", "10",
        "--log-level", env.get("WEB_LOG_LEVEL", "info"),
        *(["--access-log"] if access_log else []),
    ]


def behind_proxies(app, trusted: str | None = None):
    """`app` taking the client address from X-Forwarded-For when the peer is one of the
    `trusted` proxies (default: WEB_FORWARDED_ALLOW_IPS); `app` itself when none is set."""
    trusted = os.environ.get("WEB_FORWARDED_ALLOW_IPS", "") if trusted is None else trusted
    if not trusted.strip():
        return app
    from granian.utils.proxies import wrap_wsgi_with_proxy_headers  # only behind a proxy

    return wrap_wsgi_with_proxy_headers(app, trusted)


def cpus() -> int:
    """CPUs this process may run on (a container's cpuset, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def program() -> str:
    """The granian executable beside this Python (a virtualenv's bin/), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "granian")
    return beside if os.path.exists(beside) else (shutil.which("granian") or "granian")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "greenops.settings")
    exe = program()
    os.execv(exe, [exe, *argv()])


if __name__ == "__main__":
    main()
