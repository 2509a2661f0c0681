"""``greenops-agent job start|stop``: training jobs from a shell or a batch script.

    JOB=$(greenops-agent job start --workload llm-finetune --name "run 42")
    python train.py
    greenops-agent job stop "$JOB"

The requests go through collectors.client (the applications' client), with the agent's
server and token (a host token may start and stop its team's jobs). ``start`` prints only the
job id on stdout, so a script can keep it; the id is also the one the dashboard shows.
Each start carries an ``external_id`` (``--external-id``, else a fresh UUID): a start retried
after a timeout returns the job the first attempt created instead of a second job.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

COMMANDS = ("job",)


def add_parsers(sub: Any) -> None:
    job = sub.add_parser("job", help="start or stop a training job",
                         description="Start or stop a training job on the GreenOps server; "
                         "its time-to-train, energy, carbon and cost are computed at stop.")
    verbs = job.add_subparsers(dest="job_command", metavar="start|stop")
    for verb in ("start", "stop"):
        p = verbs.add_parser(verb, help=f"{verb} a training job")
        p.add_argument("--server", help="GreenOps server base URL")
        p.add_argument("--token", help="token (prefer GREENOPS_TOKEN: flags show in ps)")
        p.add_argument("--config", metavar="FILE", help="TOML config file")
        p.add_argument("--json", action="store_true", help="print the server's whole answer")
        if verb == "start":
            p.add_argument("--workload", required=True, help="the workload's slug")
            p.add_argument("--name", required=True, help="a name for this run")
            p.add_argument("--host", help="host name the job runs on (default: the workload's "
                           "GPUs)")
            p.add_argument("--gpus", metavar="0,1", help="GPU indexes on --host")
            p.add_argument("--external-id", help="your own id for the job (makes start "
                           "idempotent across retries)")
        else:
            p.add_argument("job_id", type=int, help="the id `job start` printed")


def _gpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--gpus must be comma-separated GPU indexes, got {text!r}") from None


def dispatch(args: argparse.Namespace, client: Any | None = None) -> int:
    from collectors.cli import fail
    from collectors.client import GreenOpsClient, GreenOpsError
    from collectors.config import ConfigError, load_config

    if args.job_command is None:
        return fail("job needs start or stop (see greenops-agent job --help)")
    try:
        config = load_config({"server": args.server, "token": args.token},
                             config_file=args.config)
        config.require_server()
        gpus = _gpus(getattr(args, "gpus", None))
    except (ConfigError, ValueError) as exc:
        return fail(str(exc))
    if gpus is not None and not args.host:
        return fail("--gpus needs --host: GPU indexes are per host")
    client = client or GreenOpsClient(config.server or "", config.token or "",
                                      timeout_s=config.request_timeout)
    try:
        if args.job_command == "start":
            answer = client.start_training_job(args.workload, args.name, host=args.host,
                                               gpus=gpus, external_id=args.external_id)
        else:
            answer = client.stop_training_job(args.job_id)
    except GreenOpsError as exc:
        where = f" ({exc.field})" if exc.field else ""
        return fail(f"server refused job {args.job_command}{where}: {exc.message}")
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
    elif args.job_command == "start":
        print(answer["id"])
    else:
        print(f"job {args.job_id} stopped", file=sys.stderr)
    return 0
