"""The whole path for real: an agent process with a fake NVML -> HTTP -> a Celery worker on
Redis -> PostgreSQL -> the dashboard's data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from greenops.telemetry.models import Gpu, GpuMinute, GpuSample, IngestBatch
from tests.support.celery_worker import ROOT, celery_worker
from tests.support.factories import make_host
from tests.support.polling import wait_for


@pytest.fixture
def worker_queue():
    """A real Celery worker on its own queue, reading the test database."""
    with celery_worker("e2e") as (queue, output):
        yield queue
    if b"Traceback" in output[0]:
        print(output[0].decode(errors="replace"))




@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_agent_to_worker_to_dashboard(live_server, users, team, worker_queue, tmp_path, client):
    host, token = make_host(team, name="fake-nvml-host", gpus=0)
    # The fake counter advances a fixed step per read, not with time. 1 J per read would be
    # implausible (above 400 W x dt x 1.2) for two reads under 2 ms apart, which a loaded machine
    # produces; the agent would then rightly integrate power. 1 mJ per read stays plausible.
    env = dict(os.environ, AGENT_FAKES_GPUS="2", AGENT_FAKES_ENERGY_STEP_MJ="1",
               GREENOPS_TOKEN=token)
    agent = subprocess.Popen(
        [sys.executable, "-m", "collectors.cli", "run", "--server", live_server.url,
         "--nvml-lib", "tests.support.agent_fakes", "--interval", "0.1", "--batch-seconds", "0.5",
         "--spool", str(tmp_path / "spool.db")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        # The agent registers its GPUs, then samples land through the worker.
        wait_for(lambda: GpuSample.objects.count() >= 20, timeout=60)
    finally:
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=30)
    assert agent.returncode == 0, out.decode(errors="replace")
    assert b"Traceback" not in out

    # Everything the agent acknowledged is stored exactly once, by the worker.
    wait_for(lambda: not IngestBatch.objects.filter(status="pending").exists(), timeout=60)
    assert set(Gpu.objects.filter(host=host).values_list("index", "name")) == {
        (0, "Fake NVIDIA A100-SXM4-40GB"), (1, "Fake NVIDIA A100-SXM4-40GB")}
    n = GpuSample.objects.count()
    assert n == sum(IngestBatch.objects.values_list("inserted", flat=True))
    assert n == sum(IngestBatch.objects.values_list("n_samples", flat=True))
    assert sum(GpuMinute.objects.values_list("samples", flat=True)) == n
    # The fake counter advances 1 mJ per read: every sample but each GPU's first is 1 mJ.
    energy_j = sum(GpuMinute.objects.values_list("energy_j", flat=True))
    assert energy_j == pytest.approx((n - 2) / 1000)

    client.force_login(users["member"])
    usage = client.get("/api/v1/teams/vision/usage?range=hour").json()
    assert usage["totals"]["gpus_reporting"] == 2
    assert usage["totals"]["avg_util_pct"] == pytest.approx(87.0)
    assert usage["totals"]["energy_kwh"] == pytest.approx((n - 2) / 1000 / 3.6e6)
    host.refresh_from_db()
    assert host.is_online() and host.agent_version


@pytest.mark.django_db
def test_beat_catch_up_stores_batches_whose_message_was_lost(host, client, settings):
    """If the broker lost the queue message, the pending row is still stored by beat."""
    from greenops.telemetry.tasks import process_pending_batches
    from tests.support.factories import gz, make_batch

    _, token = host
    # No on-commit capture: the task message is never sent, as if Redis had dropped it.
    r = client.post("/api/v1/samples", gz(make_batch(n_per_gpu=4)),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}",
                    HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 202
    assert GpuSample.objects.count() == 0
    assert process_pending_batches(older_than_s=0) == 1
    assert GpuSample.objects.count() == 8
    assert process_pending_batches(older_than_s=0) == 0
