"""The host-setup subcommands of ``greenops-agent``: ``enroll`` and ``doctor``, and the server
lines of ``status``. Kept apart from cli.py, which owns ``run``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from collectors.config import ConfigError, load_config

COMMANDS = ("enroll", "doctor")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    enroll = sub.add_parser(
        "enroll",
        help="register this host with a GreenOps server (once, with a token from Add host)",
        description="Trade the single-use enrollment token from the server's Add host page "
        "for this host's own token, register its GPUs and facts, and write server and token "
        "to the config file (mode 0600) that `run` reads: /etc/greenops/agent.toml as root, "
        "else ~/.config/greenops/agent.toml.",
    )
    enroll.add_argument("--server", required=True, help="GreenOps server base URL")
    enroll.add_argument("--token", required=True, help="enrollment token (gen_...), single use")
    enroll.add_argument("--config", metavar="FILE", help="config file to write")
    enroll.add_argument("--name", help="hostname to register (default: this host's name)")
    enroll.add_argument("--simulate", type=int, metavar="N",
                        help="register N simulated GPUs (no NVML); `run` then simulates too")
    enroll.add_argument("--nvml-lib", metavar="MODULE", help="import this instead of pynvml")
    enroll.add_argument("--dcgm-url", metavar="URL",
                        help="dcgm-exporter's /metrics, e.g. http://127.0.0.1:9400/metrics: "
                        "GPUs come from it where NVML is absent (Kubernetes GPU nodes), and "
                        "`run` reads it (written to the config as a [[scrape]] dcgm target)")
    enroll.add_argument("--instance-type", help="e.g. p4d.24xlarge (default: cloud metadata)")
    enroll.add_argument("--region", help="e.g. us-east-1 (default: cloud metadata)")
    enroll.add_argument("--provider", help="aws, gcp, azure or on_prem")
    enroll.add_argument("--country", help="ISO 3166 alpha-3 country, e.g. USA")
    enroll.add_argument(
        "--metadata-url",
        default=os.environ.get("GREENOPS_METADATA_URL", "http://169.254.169.254"),
        help="instance metadata service (AWS IMDSv2); 'off' to skip. Asked only when instance "
        "type or region is not given, with a 0.3 s timeout",
    )

    doctor = sub.add_parser("doctor", help="check NVML, metrics, codecarbon, server, clock, token")
    doctor.add_argument("--config", metavar="FILE", help="TOML config file")
    doctor.add_argument("--server", help="GreenOps server base URL")
    doctor.add_argument("--nvml-lib", metavar="MODULE", help="import this instead of pynvml")
    doctor.add_argument("--simulate", type=int, metavar="N", help="check with N simulated GPUs")


def _fail(message: str) -> int:
    from collectors.cli import fail

    return fail(message)


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "enroll":
        return enroll(args)
    return doctor(args)


def _gpus(simulate: int | None, nvml_lib: str | None, dcgm_url: str | None = None) -> list[dict]:
    from collectors.dcgm import DcgmUnavailable, open_gpu_source
    from collectors.inventory import build_inventory
    from collectors.scrape import TargetError, parse_target
    from collectors.simulated import SimulatedSource
    from collectors.sources import NvmlSource, NvmlUnavailable, load_nvml_lib

    try:
        if simulate:
            source = SimulatedSource(simulate)
        elif dcgm_url:
            # The same choice `run` makes: NVML with the exporter's fields beside it, or the
            # exporter alone where NVML is absent or sees no GPU.
            target = parse_target({"url": dcgm_url, "kind": "dcgm"}, "--dcgm-url")
            source = open_gpu_source(nvml_lib, target, 15.0)
        else:
            source = NvmlSource(load_nvml_lib(nvml_lib))
    except TargetError as exc:
        raise ConfigError(str(exc)) from None
    except DcgmUnavailable as exc:
        raise ConfigError(f"no NVML and {exc}") from None
    except NvmlUnavailable as exc:
        raise ConfigError(f"{exc}; use --dcgm-url URL on a host whose GPUs dcgm-exporter "
                          "reports, or --simulate N to enroll with simulated GPUs") from None
    except ImportError as exc:
        raise ConfigError(f"cannot import the NVML library: {exc}") from None
    try:
        gpus = build_inventory(source.gpus())["gpus"]
    finally:
        source.close()
    if not gpus:
        raise ConfigError("NVML found no GPUs on this host; use --simulate N for a demo host")
    return gpus


def enroll(args: argparse.Namespace) -> int:
    from pathlib import Path

    from collectors import enroll as en

    if args.simulate is not None and args.simulate < 1:
        return _fail("--simulate must be at least 1 GPU")
    if args.simulate and args.dcgm_url:
        return _fail("--simulate and --dcgm-url exclude each other: a simulated host reads no "
                     "real GPUs, so the exporter would never be read")
    path = Path(args.config).expanduser() if args.config else en.enroll_config_path()
    try:
        en.check_writable(path)  # before the server spends the single-use token
        gpus = _gpus(args.simulate, args.nvml_lib, args.dcgm_url)
        configured = {"instance_type": args.instance_type, "region": args.region,
                      "provider": args.provider, "country": args.country}
        metadata = None if args.metadata_url in ("", "off", "none") else args.metadata_url
        facts = en.gather_facts(configured, metadata)
        doc = en.request_enrollment(args.server, args.token, gpus, facts, hostname=args.name)
        updates: dict = {"server": args.server.rstrip("/"), "token": doc["token"]}
        if args.simulate:
            updates["simulate"] = args.simulate
        if args.nvml_lib:
            updates["nvml_lib"] = args.nvml_lib
        if args.dcgm_url:
            updates["scrape"] = en.with_dcgm_target(en.existing_scrape(path), args.dcgm_url)
        en.write_config(path, updates)
    except (en.EnrollError, ConfigError) as exc:
        return _fail(str(exc))
    print(f"enrolled as host {doc['host']} in team {doc['team']} ({doc['gpus']} GPUs); "
          f"token written to {path} (mode 0600)")
    print(f"next: greenops-agent run{' --config ' + str(path) if args.config else ''}"
          "   (or enable the systemd unit from the Add host page)")
    return 0


def doctor(args: argparse.Namespace) -> int:
    from collectors import doctor as dr

    flags = {"server": args.server, "nvml_lib": args.nvml_lib, "simulate": args.simulate}
    try:
        config = load_config(flags, config_file=args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    checks = dr.run_checks(config)
    for check in checks:
        print(check.line())
    failed = [c for c in checks if c.status == dr.FAIL]
    print(f"{len(failed)} problem(s)" if failed else "all checks passed")
    return 1 if failed else 0


def status_server_lines(config, retrying_since: float | None = None) -> list[str]:
    """`status`: is the server reachable, and does it still accept this host's token?"""
    from collectors import probe

    if not config.server:
        return ["server:          not configured"]
    answer, _skew = probe.server_time(config.server, timeout_s=3.0)
    if answer.status is None or not answer.ok:
        return [f"server:          {config.server} unreachable ({answer.server_message()})"]
    lines = [f"server:          {config.server} reachable ({answer.rtt_s * 1000:.0f} ms)"]
    if config.token:
        who = probe.whoami(config.server, config.token, timeout_s=3.0)
        lines.append(token_line(who))
        if who.ok:
            lines.extend(server_view_lines(who.doc, retrying_since))
    return lines


SILENT_WARN_S = 120  # the server's online window (greenops.telemetry.host_status)


def server_view_lines(doc: dict, retrying_since: float | None = None) -> list[str]:
    """What the server has of this host: when its last batch came (an agent that stopped
    sending shows here even when this process cannot tell), and batches it accepted but has
    not stored yet (a data lag on the server side, not in this spool). Older servers send
    neither; then nothing is said."""
    lines = []
    silent = doc.get("silent_s")
    if "silent_s" in doc:
        if silent is None:
            lines.append("last batch:      none received yet by the server")
        elif silent > SILENT_WARN_S and retrying_since is not None:
            # This agent is sending and being refused or timed out (see "sending"): the
            # silence is the outage it is riding out, not a stopped agent.
            since = time.strftime("%H:%M", time.localtime(retrying_since))
            lines.append(f"last batch:      {silent:.0f} s ago (this agent has been retrying "
                         f"since {since}; its batches are spooled)")
        elif silent > SILENT_WARN_S:
            lines.append(f"last batch:      {silent:.0f} s ago -- AGENT STOPPED SENDING? "
                         "(is greenops-agent run running?)")
        else:
            lines.append(f"last batch:      {silent:.0f} s ago")
    pending = doc.get("pending_batches")
    if isinstance(pending, int):
        if pending:
            lines.append(f"data lag:        {pending} batch(es) accepted, not yet stored; oldest "
                         f"{doc.get('data_lag_s') or 0:.0f} s (server workers down or behind)")
        else:
            lines.append("data lag:        none (every accepted batch is stored)")
    return lines


def token_line(who) -> str:
    """Only a 401/403 means the token was refused: a 5xx (database down, say) or a timeout
    says nothing about the token, and telling an operator to re-enroll then sends them the
    wrong way."""
    if who.ok:
        return f"token:           accepted (host {who.doc.get('host')})"
    if who.status in (401, 403):
        return "token:           REJECTED (revoked or rotated? enroll again)"
    if who.status is None:
        return f"token:           not checked (no answer: {who.server_message()})"
    return (f"token:           not checked (server error HTTP {who.status}: "
            f"{who.server_message()})")


def print_status_server(config, retrying_since: float | None = None) -> None:
    for line in status_server_lines(config, retrying_since):
        print(line, file=sys.stdout)
