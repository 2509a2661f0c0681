"""One live demo host: the real agent (collectors.cli.run) fed by the host's story.

    python -m greenops.demo.agent HOST --server URL --spool PATH --idle-since UNIX_TIME

The host token comes from GREENOPS_TOKEN (flags show in ps). Run by `manage.py demo`, one
process per demo host, stopped with SIGTERM when the demo stops; the agent flushes its spool
then. Imports no Django: it is the agent, as on a GPU host, with a simulated source.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence

from collectors import cli
from collectors.config import AgentConfig, ConfigError
from greenops.demo.story import BY_NAME, StorySource


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="greenops.demo.agent")
    parser.add_argument("host", choices=sorted(BY_NAME))
    parser.add_argument("--server", required=True)
    parser.add_argument("--spool", required=True)
    parser.add_argument(
        "--idle-since",
        type=float,
        required=True,
        help="unix time the research box was last used (the story's anchor)",
    )
    args = parser.parse_args(argv)
    host = BY_NAME[args.host]
    # Built here, not from /etc/greenops/agent.toml: a demo must not pick up a real host's
    # settings. simulate=N marks every batch simulated and keeps real CPU figures out.
    config = AgentConfig(
        server=args.server,
        token=os.environ.get("GREENOPS_TOKEN", ""),
        spool=args.spool,
        simulate=host.gpus,
        host_energy="off",
    )
    try:
        config.require_server()
    except ConfigError as exc:
        return cli.fail(str(exc))
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format=f"%(asctime)s demo agent {host.name}: %(message)s",
    )
    return cli.run(config, source=StorySource(host, time.time, args.idle_since))


if __name__ == "__main__":
    raise SystemExit(main())
