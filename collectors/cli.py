"""``greenops-agent``: the command line. Errors a user can fix are one line and exit 2."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from collectors import __version__

if TYPE_CHECKING:
    from collectors.sources import GpuSource

EXIT_USAGE = 2
PROG = "greenops-agent"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="GreenOps host agent: samples GPU power, energy and utilisation (NVML) "
        "and ships it to a GreenOps server.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="sample GPUs and ship the samples",
        description="Sample every GPU every --interval seconds and ship batches to --server. "
        "Each setting can also come from an environment variable (GREENOPS_SERVER, "
        "GREENOPS_TOKEN, GREENOPS_SPOOL, GREENOPS_INTERVAL, ...) or from a TOML config file "
        "(default /etc/greenops/agent.toml); flags win over the environment, which wins "
        "over the file.",
    )
    run.add_argument("--server", help="GreenOps server base URL, e.g. https://greenops.example")
    run.add_argument("--token", help="agent token (prefer GREENOPS_TOKEN: flags show in ps)")
    run.add_argument(
        "--simulate",
        type=int,
        metavar="N",
        help="run with N simulated GPUs instead of NVML (data marked simulated)",
    )
    run.add_argument("--seed", type=int, help="seed of the simulated curves (default 0)")
    run.add_argument(
        "--interval", type=float, metavar="S", help="seconds between samples (default 1.0)"
    )
    run.add_argument(
        "--batch-seconds", type=float, metavar="S", help="seconds of samples per batch (default 10)"
    )
    run.add_argument(
        "--flush-timeout",
        type=float,
        metavar="S",
        help="seconds to try to empty the spool on SIGTERM/SIGINT (default 5)",
    )
    run.add_argument(
        "--request-timeout", type=float, metavar="S", help="seconds per HTTP request (default 10)"
    )
    run.add_argument(
        "--spool",
        metavar="PATH",
        help="spool database (default ~/.local/state/greenops-agent/spool.db, "
        "or /var/lib/greenops-agent/spool.db as root)",
    )
    run.add_argument(
        "--spool-max-mb",
        type=float,
        metavar="MB",
        help="spool size bound; the oldest batches are dropped beyond it (default 1024)",
    )
    run.add_argument(
        "--spool-max-batches",
        type=int,
        metavar="N",
        help="spool batch-count bound (default 1000000)",
    )
    run.add_argument("--config", metavar="FILE", help="TOML config file")
    run.add_argument(
        "--nvml-lib",
        metavar="MODULE",
        help="import this dotted module instead of pynvml; it must provide the "
        "pynvml function names (used by tests and benchmarks to run the agent "
        "with a fake NVML)",
    )
    run.add_argument("--device-source", choices=("nvml", "amd", "neuron", "jetson"),
                     help="what reads the devices: nvml (default), amd (amd-smi), neuron "
                     "(neuron-monitor) or jetson (tegrastats)")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    status = sub.add_parser("status", help="show the spool: depth, oldest batch, last ack")
    status.add_argument("--spool", metavar="PATH", help="spool database (default as for run)")
    status.add_argument("--config", metavar="FILE", help="TOML config file")

    sub.add_parser("version", help="print the agent version")
    from collectors import cli_host

    cli_host.add_parsers(sub)
    from collectors import cli_jobs

    cli_jobs.add_parsers(sub)
    from collectors import bench

    bench.add_parsers(sub)
    return parser


def fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(f"{PROG} {__version__}")
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from collectors import cli_host

    if args.command in cli_host.COMMANDS:
        return cli_host.dispatch(args)
    from collectors import cli_jobs

    if args.command in cli_jobs.COMMANDS:
        return cli_jobs.dispatch(args)
    from collectors import bench

    if args.command in bench.COMMANDS:
        return bench.main(args)
    # Imported here so that --help and version stay instant and dependency-free.
    from collectors.config import ConfigError, load_config

    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config", "verbose")}
    try:
        config = load_config(flags, config_file=args.config)
        if args.command == "status":
            return show_status(config)
        config.require_server()
    except ConfigError as exc:
        return fail(str(exc))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return run(config)


def show_status(config: object) -> int:
    from collectors.cli_host import print_status_server
    from collectors.spool import Spool

    path = config.spool_path  # type: ignore[attr-defined]
    if not path.exists():
        # Normal right after `enroll`: `run` creates the spool. The server and token checks
        # are what the user wants to see then, so they still run.
        print(f"spool:           {path} (not created yet)")
        print("batches:         no batches sent yet (start `greenops-agent run`)")
        print_status_server(config)
        return 0
    with Spool(path) as spool:
        st = spool.status()
    last_ack = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.last_ack_at))
        if st.last_ack_at
        else "never"
    )
    oldest = f"{st.oldest_age_s:.0f}s" if st.oldest_age_s is not None else "-"
    print(f"spool:           {path}")
    print(f"sending:         {sending_line(st)}")
    print(f"batches waiting: {st.depth} ({st.samples} samples, {st.bytes} bytes)")
    print(f"oldest batch:    {oldest}")
    print(f"last ack:        {last_ack}")
    print(f"rejected:        {st.rejected}")
    print(f"dropped (full):  {st.dropped_batches}")
    print_status_server(config, st.retrying_since)
    return 0


def sending_line(st) -> str:
    """What the shipper is doing, in words: retrying (since when, how much is waiting) or
    keeping up. The server's "last batch" line may then be old: that is the outage, not a
    stopped agent."""
    if st.retrying_since is not None:
        since = time.strftime("%H:%M", time.localtime(st.retrying_since))
        return (f"retrying since {since}, {st.depth} batch{'es' if st.depth != 1 else ''} "
                "spooled (sent once the server answers)")
    if st.depth:
        return f"sending, {st.depth} batch{'es' if st.depth != 1 else ''} spooled"
    return "up to date"


def stop_on_signal(agent):
    """SIGTERM's and SIGINT's handler: stop the agent from a thread of its own. A handler runs
    in the main thread between two bytecodes, and agent.stop() sets a threading.Event whose lock
    the main thread holds for a few bytecodes of every tick's wait: a handler that set it there
    waited on its own thread, and the agent hung until killed, its last ticks unsent (they were
    kept in the spool's journal for the next start)."""

    def stop(signum: int) -> None:
        logging.getLogger(__name__).info("received %s; stopping", signal.Signals(signum).name)
        agent.stop()

    def on_signal(signum: int, frame: object) -> None:
        threading.Thread(target=stop, args=(signum,), name="stop", daemon=True).start()

    return on_signal


def run(config: object, source: GpuSource | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT. `source` replaces NVML or --simulate (the demo
    passes its own simulated fleet this way)."""
    from collectors.agent import Agent
    from collectors.channels import build_channels
    from collectors.config import AgentConfig
    from collectors.dcgm import DcgmUnavailable, open_gpu_source
    from collectors.inventory import build_inventory
    from collectors.shipper import Shipper
    from collectors.simulated import SimulatedSource
    from collectors.sources import NvmlUnavailable
    from collectors.spool import Spool
    from collectors.transport import HttpTransport

    assert isinstance(config, AgentConfig)
    dcgm = next((t for t in config.scrape if t.kind == "dcgm"), None)
    if config.simulate and dcgm is not None and source is None:
        # Every configured source runs, or the agent says why it will not start: simulated
        # GPUs would leave the exporter's real figures unread without a word.
        return fail(f"the config has simulate = {config.simulate} and a dcgm-exporter target "
                    f"({dcgm.url}); a simulated host reads no real GPUs, so remove one of them")
    try:
        if source is None and config.simulate:
            source = SimulatedSource(config.simulate, seed=config.seed)
        elif source is None and config.device_source != "nvml":
            from collectors.devices import DeviceUnavailable, open_device_source

            try:
                source = open_device_source(config.device_source, config.device_max_power_w)
            except DeviceUnavailable as exc:
                return fail(str(exc))
        elif source is None:
            source = open_gpu_source(config.nvml_lib, dcgm, config.scrape_interval)
    except NvmlUnavailable as exc:
        return fail(f"{exc}; use --simulate N to run with simulated GPUs, or a "
                    "[[scrape]] kind = \"dcgm\" target to read GPUs from dcgm-exporter")
    except DcgmUnavailable as exc:
        return fail(f"no NVML and {exc}")
    if not source.gpus():
        source.close()
        return fail("NVML found no GPUs on this host; use --simulate N to run with simulated GPUs")
    try:
        spool = Spool(
            config.spool_path,
            max_bytes=int(config.spool_max_mb * 1024**2),
            max_batches=config.spool_max_batches,
        )
    except (OSError, Exception) as exc:  # sqlite3.Error included
        source.close()
        return fail(f"cannot open spool {config.spool_path}: {exc}")
    transport = HttpTransport(config.server or "", config.token or "", config.request_timeout)
    shipper = Shipper(
        spool,
        transport,
        build_inventory(source.gpus()),
        backoff_base_s=config.backoff_base,
        backoff_cap_s=config.backoff_cap,
    )
    agent = Agent(
        source,
        spool,
        shipper,
        # dcgm-exporter alone: read at the scrape rate (it refreshes every few seconds at best).
        interval_s=config.scrape_interval if source.kind == "dcgm" else config.interval,
        batch_seconds=config.batch_seconds,
        flush_timeout_s=config.flush_timeout,
        channels=build_channels(config, simulated=bool(config.simulate), source=source),
    )

    on_signal = stop_on_signal(agent)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.run()
    finally:
        spool.close()
        source.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
