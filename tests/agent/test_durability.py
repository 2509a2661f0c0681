"""Agent durability: samples reach the spool as they are taken, and energy is conserved across an
agent restart (issue 13).

A SIGKILL is simulated in-process by dropping an Agent without shutdown() and opening a new one
on the same spool file: that is exactly what the next start sees after a kill (the journal is
committed SQLite rows; nothing else survives a process). The clock is a fake, so every gap and
every joule below is worked out by hand in the comments.
"""

from __future__ import annotations

import marshal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from collectors import agent as agent_mod
from collectors import batch as wire
from collectors.agent import Agent
from collectors.energy import (
    COUNTER,
    COUNTER_GAP,
    MAX_COUNTER_GAP_S,
    PLAUSIBLE_MARGIN,
    gap_energy,
)
from collectors.sources import NvmlSource
from collectors.spool import Spool
from tests.support import ROOT
from tests.support.agent_fakes import FakeNvml

LIMIT_W = 400.0  # FakeNvml's nvmlDeviceGetPowerManagementLimit: 400,000 mW


class Clock:
    """time.time() and time.monotonic() for collectors.agent, moved by hand."""

    def __init__(self, mono: float = 1000.0, wall: float = 1_790_000_000.0) -> None:
        self.mono, self.wall = mono, wall

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, s: float) -> None:
        self.mono += s
        self.wall += s


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(agent_mod, "time", SimpleNamespace(monotonic=c.monotonic, time=c.time))
    monkeypatch.setattr(agent_mod, "boot_id", lambda: "boot-1")
    return c


def new_agent(spool: Spool, nvml: FakeNvml) -> Agent:
    return Agent(NvmlSource(nvml), spool, shipper=None, interval_s=1.0, batch_seconds=10.0)


def spooled_samples(spool: Spool) -> list[dict]:
    return [wire.decode(p)["samples"] for p in spool.payloads()]


def test_every_tick_is_on_disk_before_the_next_one(tmp_path, clock):
    spool = Spool(tmp_path / "spool.db")
    agent = new_agent(spool, FakeNvml(n=2))
    for _ in range(3):
        agent.sample_once()
        clock.advance(1.0)
    # No batch was cut (10 s batches), yet all 3 ticks x 2 GPUs are committed to the journal.
    assert spool.depth() == 0
    assert spool.journaled_samples() == 6
    with Spool(tmp_path / "spool.db") as other:  # what another process (or the next start) sees
        assert other.journaled_samples() == 6


def test_after_a_kill_the_next_start_spools_what_was_journaled_exactly_once(tmp_path, clock):
    path = tmp_path / "spool.db"
    spool = Spool(path)
    first = new_agent(spool, FakeNvml(n=2))
    for _ in range(12):  # one batch cut at tick 10 (with 20 samples), 2 ticks after it
        first.sample_once()
        clock.advance(1.0)
        if len(first.buffer) == 20:
            first.seal_batch()
    taken = [(g, t) for g, t in zip(first.buffer.gpu_index, first.buffer.ts, strict=True)]
    assert len(taken) == 4 and spool.depth() == 1
    spool.close()  # SIGKILL: no shutdown(), the buffer is gone with the process

    spool = Spool(path)
    new_agent(spool, FakeNvml(n=2))
    assert spool.depth() == 2 and spool.journaled_samples() == 0
    sealed, recovered = spooled_samples(spool)
    assert list(zip(recovered["gpu_index"], recovered["ts"], strict=True)) == taken
    # The same wire columns as the batch the running agent sealed.
    assert set(recovered) == set(sealed)
    assert recovered["energy_method"] == [COUNTER] * 4
    ids = spool.batch_ids()
    spool.close()

    spool = Spool(path)  # a second start finds nothing left to recover: no duplicate batch
    new_agent(spool, FakeNvml(n=2))
    assert spool.batch_ids() == ids
    spool.close()


def test_a_batch_and_the_journal_never_both_hold_a_sample(tmp_path, clock):
    spool = Spool(tmp_path / "spool.db")
    agent = new_agent(spool, FakeNvml(n=2))
    for _ in range(3):
        agent.sample_once()
        clock.advance(1.0)
    agent.seal_batch()
    assert spool.journaled_samples() == 0
    assert len(spooled_samples(spool)[0]["ts"]) == 6


def test_the_first_interval_after_a_restart_covers_the_gap(tmp_path, clock):
    path = tmp_path / "spool.db"
    nvml = FakeNvml(n=2, energy_step_mj=0)
    spool = Spool(path)
    first = new_agent(spool, nvml)
    first.sample_once()  # counters 10,000,000 mJ (GPU 0) and 20,000,000 mJ (GPU 1)
    spool.close()  # killed

    # 30 s later the agent is back; meanwhile GPU 0 drew 250 W: 250 W x 30 s = 7,500 J, and
    # GPU 1 drew 100 W: 3,000 J.
    clock.advance(30.0)
    nvml.energy_mj = [10_000_000 + 7_500_000, 20_000_000 + 3_000_000]
    spool = Spool(path)
    second = new_agent(spool, nvml)
    second.sample_once()
    b = second.buffer
    assert b.energy_j == [7500.0, 3000.0]
    assert b.energy_method == [COUNTER_GAP, COUNTER_GAP]
    clock.advance(1.0)
    second.sample_once()  # and from then on, ordinary intervals: 0 J (the fake did not move)
    assert b.energy_method[2:] == [COUNTER, COUNTER]
    spool.close()


def test_a_clean_stop_carries_the_counter_over_too(tmp_path, clock):
    path = tmp_path / "spool.db"
    nvml = FakeNvml(n=1, energy_step_mj=0)
    spool = Spool(path)
    first = new_agent(spool, nvml)
    first.sample_once()
    first.shutdown()  # seals the batch; the state outlives the journal
    spool.close()
    clock.advance(60.0)
    nvml.energy_mj[0] += 60 * 300 * 1000  # 300 W x 60 s = 18,000 J
    spool = Spool(path)
    second = new_agent(spool, nvml)
    second.sample_once()
    assert (second.buffer.energy_j, second.buffer.energy_method) == ([18000.0], [COUNTER_GAP])
    spool.close()


@pytest.mark.parametrize(
    "case, gap_s, delta_mj, boot, uuid_changed",
    [
        # The driver was reloaded (or the GPU reset) while the agent was down: counter went down.
        ("counter reset", 30.0, -1, "boot-1", False),
        # 400 W x 30 s x 1.2 = 14,400 J is the most a 400 W board can plausibly draw in 30 s.
        ("implausible", 30.0, 14_400_001, "boot-1", False),
        # Over an hour a reload could hide behind a counter that climbed past its old value.
        ("too long", MAX_COUNTER_GAP_S + 1, 1_000_000, "boot-1", False),
        # The host rebooted: a new boot's monotonic clock and counters start again.
        ("rebooted", 30.0, 1_000_000, "boot-2", False),
        # Another GPU at the same index (a board was swapped): not the same counter.
        ("other GPU", 30.0, 1_000_000, "boot-1", True),
    ],
)
def test_no_gap_energy_without_a_counter_that_vouches_for_it(
        tmp_path, clock, monkeypatch, case, gap_s, delta_mj, boot, uuid_changed):
    path = tmp_path / "spool.db"
    nvml = FakeNvml(n=1, energy_step_mj=0)
    spool = Spool(path)
    new_agent(spool, nvml).sample_once()
    spool.close()
    clock.advance(gap_s)
    nvml.energy_mj[0] += delta_mj
    monkeypatch.setattr(agent_mod, "boot_id", lambda: boot)
    if uuid_changed:
        nvml.nvmlDeviceGetUUID = lambda handle: "GPU-swapped"
    spool = Spool(path)
    second = new_agent(spool, nvml)
    second.sample_once()
    # As a first sample: no interval, no energy, no method -- never a power-based guess.
    assert (second.buffer.energy_j, second.buffer.energy_method) == ([None], [None]), case
    spool.close()


def test_a_gap_at_the_plausibility_bound_is_kept():
    # 400 W x 30 s x 1.2 = 14,400 J: at the bound the counter still counts, 1 mJ above it not.
    bound_mj = int(LIMIT_W * 30 * PLAUSIBLE_MARGIN * 1000)
    assert gap_energy(30.0, 0, bound_mj, LIMIT_W) == 14_400.0
    assert gap_energy(30.0, 0, bound_mj + 1, LIMIT_W) is None
    assert gap_energy(MAX_COUNTER_GAP_S, 0, 1000, LIMIT_W) == 1.0
    assert gap_energy(30.0, 5, 5, LIMIT_W) == 0.0  # an idle GPU: 0 J measured
    assert gap_energy(30.0, 0, 1000, None) is None  # no limit known: cannot judge
    assert gap_energy(30.0, None, 1000, LIMIT_W) is None


def test_a_host_without_a_boot_id_places_the_old_reading_by_the_wall_clock(
        tmp_path, clock, monkeypatch):
    monkeypatch.setattr(agent_mod, "boot_id", lambda: None)
    path = tmp_path / "spool.db"
    nvml = FakeNvml(n=1, energy_step_mj=0)
    spool = Spool(path)
    new_agent(spool, nvml).sample_once()
    spool.close()
    # A new process: its monotonic clock has another origin (here 5,000 s back), the wall
    # clock moved 20 s. 200 W x 20 s = 4,000 J.
    clock.wall += 20.0
    clock.mono -= 5000.0
    nvml.energy_mj[0] += 4_000_000
    spool = Spool(path)
    second = new_agent(spool, nvml)
    second.sample_once()
    assert (second.buffer.energy_j, second.buffer.energy_method) == ([4000.0], [COUNTER_GAP])
    spool.close()


def test_the_journal_row_is_readable_by_this_python(tmp_path, clock):
    spool = Spool(tmp_path / "spool.db")
    new_agent(spool, FakeNvml(n=1)).sample_once()
    (row,) = spool.journaled()
    assert marshal.loads(row)["gpu_index"] == [0]
    spool.close()


@pytest.mark.django_db
def test_the_server_stores_a_gap_interval_as_such(host, post_batch):
    from greenops.telemetry.models import EnergyMethod, GpuMinute, GpuSample
    from tests.support.factories import make_batch

    h, token = host
    doc = make_batch(n_per_gpu=2, gpus=(0,))
    doc["samples"]["energy_j"][1] = 7500.0  # the agent was down 30 s: 250 W x 30 s
    doc["samples"]["energy_method"][1] = COUNTER_GAP
    assert post_batch(token, doc).status_code == 202
    methods = sorted(GpuSample.objects.filter(gpu__host=h).values_list("energy_method", flat=True),
                     key=lambda m: m or 0)
    assert methods == [None, EnergyMethod.COUNTER_GAP]
    assert sum(GpuMinute.objects.filter(gpu__host=h).values_list("energy_j", flat=True)) == 7500.0


def test_systemd_gives_the_agent_time_to_flush_before_it_kills_it():
    """systemd SIGKILLs a service still running TimeoutStopSec after SIGTERM. The agent needs
    --flush-timeout (5 s by default) plus its shipper's 0.5 s join to send what it spooled; the
    served unit and the README's copy must say the same, and leave that time."""
    import re

    from collectors.config import AgentConfig
    from greenops.telemetry.agent_dist import systemd_unit

    readme = (ROOT / "collectors" / "README.md").read_text()
    served = re.findall(r"^TimeoutStopSec=(\d+)", systemd_unit(), re.M)
    documented = re.findall(r"^TimeoutStopSec=(\d+)", readme, re.M)
    assert served == documented == ["15"]
    assert int(served[0]) > AgentConfig.flush_timeout + 0.5


STOP_WHILE_WAITING = """
import signal, sys, threading
from types import SimpleNamespace
from collectors import cli

stop = threading.Event()
handler = cli.stop_on_signal(SimpleNamespace(stop=stop.set))
# Where the sampling loop's Event.wait holds the event's lock: entering and leaving the wait.
# A signal handler runs in the main thread, so one that set the event here waited on a lock
# its own thread held.
with stop._cond:
    handler(signal.SIGTERM, None)
sys.exit(0 if stop.wait(5) else 3)
"""


def test_a_stop_signal_landing_inside_the_loops_wait_stops_the_agent():
    """SIGTERM's handler once called agent.stop() itself, which sets a threading.Event: landing
    while the main thread held that event's lock (a few bytecodes of every tick's wait), it
    deadlocked, and the agent hung until killed with its last ticks unsent (the demo's flush
    test failed once so: 3 ticks left in a spool's journal). Run in a child process, since the
    old handler hangs rather than fails."""
    done = subprocess.run([sys.executable, "-c", STOP_WHILE_WAITING], cwd=ROOT, timeout=15,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
