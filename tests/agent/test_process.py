"""A real agent process (fake NVML via --nvml-lib) against a local HTTP server."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from collectors import batch as wire
from collectors.spool import Spool
from tests.support import ROOT
from tests.support.agent_process import stop_agent, wait_for

try:
    from tests.support.agent_fakes import FakeServer, free_port
except ImportError:  # tests/ itself on sys.path (pytest's rootdir-less import mode)
    from agent_fakes import FakeServer, free_port



def start_agent(tmp_path: Path, server_url: str, *extra: str) -> subprocess.Popen:
    config = tmp_path / "agent.toml"
    config.write_text("")  # hermetic: never read the host's /etc/greenops/agent.toml
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
    env["AGENT_FAKES_GPUS"] = "2"
    env["GREENOPS_TOKEN"] = "tok-e2e"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "collectors.cli",
            "run",
            "--server",
            server_url,
            "--config",
            str(config),
            "--nvml-lib",
            "tests.support.agent_fakes",
            "--spool",
            str(tmp_path / "spool.db"),
            "--interval",
            "0.05",
            "--batch-seconds",
            "0.2",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )




def samples_taken(stderr: str) -> int:
    match = re.search(r"stopped: samples=(\d+)", stderr)
    assert match, stderr
    return int(match.group(1))




def spooled_depth(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with Spool(path) as spool:
            return spool.depth()
    except Exception:  # the agent may be creating the file right now
        return 0


def test_sigterm_exits_0_and_every_sample_arrives(tmp_path):
    server = FakeServer().start()
    try:
        proc = start_agent(tmp_path, server.url, "--batch-seconds", "0.5")
        wait_for(lambda: len(server.accepted) >= 2)
        time.sleep(0.15)  # a few samples into the next batch: the shutdown must ship them
        accepted_before_stop = len(server.accepted)
        rc, stderr, took = stop_agent(proc)
    finally:
        server.stop()
    assert len(server.accepted) == accepted_before_stop + 1  # the buffered tail, flushed
    assert rc == 0, stderr
    assert took < 3.0
    assert "Traceback" not in stderr
    keys = server.sample_keys()
    taken = samples_taken(stderr)
    assert taken > 0
    assert len(keys) == len(set(keys)) == taken  # every sample, none twice
    assert server.duplicates == 0
    assert server.requests[0].path == "/api/v1/inventory"
    assert server.requests[0].headers["Authorization"] == "Bearer tok-e2e"
    doc = server.accepted[0]
    assert doc["source"] == "nvml"
    s = doc["samples"]
    # GPU 0 and 1 alternate; the first sample of each GPU has no interval.
    assert s["gpu_index"][:4] == [0, 1, 0, 1]
    assert s["energy_method"][:2] == [None, None]
    assert s["energy_j"][:2] == [None, None]
    # The fake counter rises 1000 mJ per read: 1 J per interval, from the counter.
    assert s["energy_j"][2:4] == [1.0, 1.0]
    assert s["energy_method"][2:4] == ["counter", "counter"]
    assert s["power_w"][0] == 250.0


def test_batches_spooled_while_server_was_down_are_delivered_after_restart(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = start_agent(tmp_path, url, "--flush-timeout", "0.5")
    # Stop only once the agent is sampling (a batch is spooled): a SIGTERM that lands while the
    # interpreter is still importing, on a loaded machine, kills it before its handler exists.
    wait_for(lambda: spooled_depth(tmp_path / "spool.db") >= 1, timeout=30.0)
    rc, stderr, took = stop_agent(first)
    assert rc == 0, stderr
    assert took < 3.0
    taken_first = samples_taken(stderr)
    with Spool(tmp_path / "spool.db") as spool:
        spooled_ids = spool.batch_ids()
        backlog = [key for p in spool.payloads() for key in zip(
            wire.decode(p)["samples"]["gpu_index"], wire.decode(p)["samples"]["ts"], strict=True)]
        spooled_samples = len(backlog)
    assert spooled_ids
    assert spooled_samples == taken_first  # nothing lost while the server was down

    server = FakeServer(port=port).start()
    try:
        second = start_agent(tmp_path, url)
        # The backlog, then two of the new run's batches (a backlog of several batches goes out
        # as one merged POST, collectors/shipper.py).
        wait_for(lambda: len(server.sample_keys()) >= len(backlog) and len(server.accepted) >= 3
                 or len(server.accepted) >= len(spooled_ids) + 2)
        rc, stderr, _ = stop_agent(second)
    finally:
        server.stop()
    assert rc == 0, stderr
    taken_second = samples_taken(stderr)
    accepted_ids = [d["batch_id"] for d in server.accepted]
    # The backlog first, in order, whether it went batch by batch or merged into one POST.
    assert server.sample_keys()[: len(backlog)] == backlog
    assert len(accepted_ids) == len(set(accepted_ids))
    assert server.duplicates == 0
    keys = server.sample_keys()
    assert len(keys) == len(set(keys)) == taken_first + taken_second
    with Spool(tmp_path / "spool.db") as spool:
        assert spool.depth() == 0
