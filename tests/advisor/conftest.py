"""Fixtures shared by this folder's test modules."""

from __future__ import annotations

import pytest

from greenops.telemetry.models import Gpu
from greenops.workloads.models import Workload
from tests.support.advisor import N_GPUS
from tests.support.factories import make_host


@pytest.fixture
def workload(team, post_batch):
    host, token = make_host(team, name="inference-1", gpus=N_GPUS)
    wl = Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")
    wl.hosts.add(host)

    def send(doc):
        assert post_batch(token, doc).status_code == 202

    return wl, send


@pytest.fixture
def serve(team, post_batch):
    """A workload on one host; returns (workload, host, send)."""

    def make(gpus_n: int = 4, instance_type: str = "p4d.24xlarge",
             gpu_name: str = "NVIDIA A100-SXM4-40GB"):
        host, token = make_host(team, name="inference-1", gpus=gpus_n)
        host.instance_type = instance_type
        host.save()
        Gpu.objects.filter(host=host).update(name=gpu_name)
        wl = Workload.objects.create(team=team, name="Chat", slug="chat", kind="inference")
        wl.hosts.add(host)

        def send(doc):
            assert post_batch(token, doc).status_code == 202

        return wl, host, send

    return make
