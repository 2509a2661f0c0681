"""docker-compose.yml kept correct by reading it (Docker does not run in the test suite): it parses,
every Celery queue a task can be routed to has a worker service consuming it, there is exactly
one beat, and every command names a program and module that exist here."""

from __future__ import annotations

import importlib
import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from greenops import webserver
from greenops.celery import app as celery_app
from tests.support import ROOT


def services() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def argv(service: dict) -> list[str]:
    """The command as a list; `sh -c "a && b"` is split into the words of each step."""
    cmd = service.get("command", [])
    words = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    if words[:2] == ["sh", "-c"]:
        words = [w for step in " ".join(words[2:]).split("&&") for w in shlex.split(step)]
    return words


def option(words: list[str], *names: str) -> str | None:
    for i, w in enumerate(words):
        if w in names and i + 1 < len(words):
            return words[i + 1]
    return None


def celery_role(words: list[str]) -> str | None:
    """"worker" or "beat" for a `celery -A greenops ...` command, else None."""
    if words[:1] != ["celery"]:
        return None
    return next((w for w in words if w in ("worker", "beat")), None)


def consumed_queues() -> dict[str, set[str]]:
    """Worker service -> the queues it consumes (all of CELERY_TASK_QUEUES without -Q)."""
    out = {}
    for name, svc in services().items():
        words = argv(svc)
        if celery_role(words) == "worker":
            q = option(words, "-Q", "--queues")
            out[name] = set(q.split(",")) if q else {x.name for x in settings.CELERY_TASK_QUEUES}
    return out


def routed_queue(task_name: str) -> str:
    return celery_app.amqp.router.route({}, task_name)["queue"].name


def test_every_routed_queue_has_a_worker_service():
    consumed = set().union(*consumed_queues().values())
    routed = {r["queue"] for r in settings.CELERY_TASK_ROUTES.values()}
    assert routed == {"ingest", "rollups", "alerts", "reports"}
    assert routed | {settings.CELERY_TASK_DEFAULT_QUEUE} <= consumed
    # One worker service per queue group, so a backlog in one never delays another.
    for name, queues in consumed_queues().items():
        assert len(queues) == 1, f"{name} consumes {queues}: one group per worker service"


def test_every_task_and_beat_entry_reaches_a_consumed_queue():
    celery_app.loader.import_default_modules()
    consumed = set().union(*consumed_queues().values())
    tasks = [n for n in celery_app.tasks if n.startswith("greenops.")]
    assert "greenops.telemetry.tasks.store_batch" in tasks
    for name in tasks:
        assert routed_queue(name) in consumed, name
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in celery_app.tasks, entry["task"]
        assert routed_queue(entry["task"]) in consumed, entry["task"]
    # The routes put each concern on its own queue.
    assert routed_queue("greenops.telemetry.tasks.store_batch") == "ingest"
    assert routed_queue("greenops.telemetry.tasks.process_pending_batches") == "ingest"
    assert routed_queue("greenops.kpis.tasks.rollup_kpis") == "rollups"
    assert routed_queue("greenops.alerts.tasks.evaluate_rule") == "alerts"
    assert routed_queue("greenops.reports.tasks.generate_report") == "reports"


def test_a_worker_without_queues_consumes_every_group():
    """`celery -A greenops worker` with no -Q (Makefile, bench/ingest, a one-box install) gets
    every group: CELERY_TASK_QUEUES lists them all."""
    routed = {r["queue"] for r in settings.CELERY_TASK_ROUTES.values()}
    # app.conf, not app.amqp.queues: routing to a queue it has not seen adds it there (the
    # test worker's own queues), but a new worker process starts from the configuration.
    assert {q.name for q in celery_app.conf.task_queues} == routed


def test_one_beat_and_a_web_worker_per_cpu():
    svcs = services()
    beats = [n for n, s in svcs.items() if celery_role(argv(s)) == "beat"]
    assert len(beats) == 1, f"beat services: {beats} (two beats send every task twice)"
    assert svcs[beats[0]].get("deploy", {}).get("replicas", 1) == 1
    web = svcs["web"]
    assert web_module(argv(web)) == "greenops.webserver"
    # greenops.webserver reads WEB_CONCURRENCY for its worker count: compose passes the
    # operator's value through, and empty means one worker per CPU.
    env = {**svcs["worker-ingest"].get("environment", {}), **web.get("environment", {})}
    assert env["WEB_CONCURRENCY"] == "${WEB_CONCURRENCY:-}"
    words = webserver.argv(env={"WEB_CONCURRENCY": ""})
    assert words[words.index("--workers") + 1] == str(webserver.cpus())
    words = webserver.argv(env={"WEB_CONCURRENCY": "6"})
    assert words[words.index("--workers") + 1] == "6"
    assert int(words[words.index("--blocking-threads") + 1]) >= 2  # requests overlap per process


def web_module(words: list[str]) -> str | None:
    """The module a `python -m MODULE` command runs (exec'd or not), else None."""
    for i, w in enumerate(words[:-2]):
        if w in ("python", "python3") and words[i + 1] == "-m":
            return words[i + 2]
    return None


def dockerfile_cmd() -> list[str]:
    """The Dockerfile's CMD (exec form, possibly continued over lines with a backslash)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("CMD "))
    return json.loads(line.removeprefix("CMD "))


def test_web_keeps_connections_open():
    """Both ways the image starts the web go through greenops.webserver, whose Granian keeps an
    agent's or proxy's connection open between requests (a new connection per POST was a third
    of the web's CPU per batch at 80 samples, bench/ingest) for the longest idle time Granian
    allows, and runs more than one request per process at a time."""
    for words in (argv(services()["web"]), dockerfile_cmd()):
        assert web_module(words) == "greenops.webserver", words
    words = webserver.argv(env={})
    assert "--no-http1-keep-alive" not in words
    assert int(option(words, "--http1-header-read-timeout")) == 60_000
    assert int(option(words, "--blocking-threads")) >= 2
    assert option(words, "--interface") == "wsgi"


@pytest.mark.parametrize("name", list(services()))
def test_each_command_exists(name):
    svc = services()[name]
    if "image" in svc and "build" not in svc:
        return  # postgres, redis: their images' own entrypoints
    words = argv(svc)
    bin_dir = Path(sys.executable).parent
    for program in {words[0]} | ({"granian"} if web_module(words) == "greenops.webserver"
                                 else set()):
        assert (bin_dir / program).exists() or shutil.which(program), program
    if words[0] == "celery":
        assert option(words, "-A", "--app") == "greenops"
        assert importlib.import_module("greenops.celery").app is celery_app
    if web_module(words):
        importlib.import_module(web_module(words))
    if web_module(words) == "greenops.webserver":
        module, _, name = webserver.APP.partition(":")
        assert hasattr(importlib.import_module(module), name)
    if "manage.py" in words:
        assert (ROOT / "manage.py").exists()
