"""The agent's kubelet PodResources client against a fake kubelet (tests/support/kubelet.py): a
real gRPC server on a unix socket in a temp dir that speaks v1.PodResourcesLister, with answers
shaped as the NVIDIA, AMD and Neuron device plugins fill them."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from collectors.config import load_config
from collectors.host_activity import Counters, HostActivityChannel, gpu_processes
from collectors.podresources import (
    Allocation,
    PodAttribution,
    WithPods,
    list_allocations,
    parent_uuid,
    pod_source,
    socket_for,
)
from collectors.podresources_v1 import api_pb2
from tests.support.kubelet import FakeKubelet, ctr, pod
from tests.support.polling import wait_for

UUID0 = "GPU-8f6c1a2e-5b7d-4c3a-9e10-2f4b6d8a0c11"
UUID1 = "GPU-3a9d7e41-0c2b-4f5e-8d16-7b1c9e2a4f03"


@dataclass(frozen=True)
class Info:
    index: int
    uuid: str


GPUS = [Info(0, UUID0), Info(1, UUID1)]


@pytest.fixture
def kubelet():
    fake = FakeKubelet().start()
    yield fake
    fake.close()


def test_list_reads_each_containers_gpus_and_skips_other_resources(kubelet):
    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            pod(
                "ml-serving",
                "vllm-llama-7b-6d5f8b7c9-x2kqp",
                ctr("vllm", "nvidia.com/gpu", UUID0),
                ctr("sidecar"),
            ),  # no devices at all
            pod(
                "kube-system",
                "sriov-agent-4tq9z",
                ctr("agent", "intel.com/sriov_netdevice", "0000:3b:02.1"),
            ),
        ]
    )
    assert list_allocations(kubelet.path) == [
        Allocation("ml-serving", "vllm-llama-7b-6d5f8b7c9-x2kqp", "vllm", "nvidia.com/gpu", UUID0)
    ]
    assert kubelet.calls == 1


def test_pods_come_and_go_and_a_gpu_moves_between_pods(kubelet):
    att = PodAttribution(GPUS, kubelet.path)
    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[pod("team-a", "train-0", ctr("trainer", "nvidia.com/gpu", UUID0, UUID1))]
    )
    assert att.pods() == {
        0: {("team-a", "train-0", "trainer")},
        1: {("team-a", "train-0", "trainer")},
    }
    # train-0 ends; GPU 1 goes to a pod of another namespace, GPU 0 is free.
    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            pod("team-b", "bert-serve-7f9c-abcde", ctr("triton", "nvidia.com/gpu", UUID1.lower()))
        ]
    )
    assert att.pods() == {1: {("team-b", "bert-serve-7f9c-abcde", "triton")}}
    assert att.status == "ok"


def test_an_empty_answer_means_no_pod_holds_a_gpu(kubelet):
    att = PodAttribution(GPUS, kubelet.path)
    assert att.pods() == {}
    assert att.status == "ok"


def test_a_device_the_node_does_not_have_is_not_attributed(kubelet, caplog):
    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            pod(
                "team-a",
                "ghost",
                ctr("c", "nvidia.com/gpu", "GPU-00000000-dead-beef-0000-000000000000"),
            ),
            pod("team-a", "real", ctr("c", "nvidia.com/gpu", UUID1)),
        ]
    )
    att = PodAttribution(GPUS, kubelet.path)
    assert att.pods() == {1: {("team-a", "real", "c")}}
    assert att.unknown == {"GPU-00000000-dead-beef-0000-000000000000"}
    assert "does not list" in caplog.text


def test_mig_amd_and_neuron_ids_pass_through_to_their_device(kubelet):
    mig_new = "MIG-5c89b4a1-1d2e-5f3a-9b7c-0a1b2c3d4e5f"
    amd = Info(2, "amd-0x7a3c1e5f")  # whatever the AMD source names its UUID
    neuron = Info(3, "neuron-3")
    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            # the device plugin's older MIG ids name their parent GPU
            pod("ns", "mig-old", ctr("c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/7/0")),
            # newer MIG UUIDs need the source's MIG -> parent map (aliases)
            pod("ns", "mig-new", ctr("c", "nvidia.com/mig-3g.40gb", mig_new)),
            pod("ns", "rocm", ctr("c", "amd.com/gpu", "0000:c1:00.0")),  # the AMD plugin: PCI id
            pod("ns", "inf2", ctr("c", "aws.amazon.com/neuron", "3")),  # Neuron plugin: index
        ]
    )
    att = PodAttribution(
        [*GPUS, amd, neuron], kubelet.path, aliases={mig_new: UUID0, "0000:c1:00.0": amd.uuid}
    )
    assert att.pods() == {
        0: {("ns", "mig-old", "c"), ("ns", "mig-new", "c")},
        2: {("ns", "rocm", "c")},
        3: {("ns", "inf2", "c")},
    }
    assert att.unknown == set()
    assert parent_uuid(f"MIG-{UUID0}/7/0") == UUID0


def test_a_missing_socket_or_a_kubelet_that_is_down_pauses_attribution_only(kubelet, caplog):
    att = PodAttribution(GPUS, kubelet.path + ".missing")
    assert att.pods() is None
    assert "no kubelet socket" in att.status

    att = PodAttribution(GPUS, kubelet.path, timeout_s=0.5)
    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[pod("team-a", "p", ctr("c", "nvidia.com/gpu", UUID0))]
    )
    assert att.pods() == {0: {("team-a", "p", "c")}}
    kubelet.stop()  # the kubelet restarts: its socket file stays, nobody answers
    assert os.path.exists(kubelet.path)
    assert att.pods() is None
    assert "did not answer" in att.status and "UNAVAILABLE" in att.status
    assert "pod attribution paused" in caplog.text
    kubelet.start()
    # Back at the next poll (the agent asks again each interval): on a loaded machine the
    # restarted server may take longer than one 0.5 s call to answer.
    assert wait_for(att.pods, timeout=10) == {0: {("team-a", "p", "c")}}


class Nvml:
    """An NVML source as gpu_processes reads it: one compute process on GPU 0."""

    def gpus(self):
        return GPUS

    def processes(self, index):
        return [(4242, 30_000.0)] if index == 0 else []


def test_host_activity_keeps_sampling_with_the_kubelet_down_and_names_pods_when_up(kubelet):
    att = PodAttribution(GPUS, kubelet.path, timeout_s=0.5)
    src = WithPods(Nvml(), att)
    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[pod("team-a", "train-0", ctr("trainer", "nvidia.com/gpu", UUID0))]
    )
    procs = gpu_processes(src, [0, 1])
    assert [(p.gpu_index, p.pid, p.namespace, p.pod, p.container) for p in procs] == [
        (0, 4242, None, None, None),
        (0, None, "team-a", "train-0", "trainer"),
    ]

    kubelet.stop()
    ticks = iter(range(100))
    channel = HostActivityChannel(
        read=lambda: Counters(*(10 * next(ticks),) * 6),
        processes=lambda: gpu_processes(src, [0, 1]),
        clock=lambda: 1_800_000_000.0,
        monotonic=lambda: float(next(ticks)),
    )
    channel.read_once()
    channel.read_once()
    assert len(channel.columns["ts"]) == 1  # the host's counters are still read
    assert channel.snapshot["gpus"][0]["pid"] == 4242  # NVML's processes still go out
    assert all(g["pod"] is None for g in channel.snapshot["gpus"])
    assert "did not answer" in att.status


def test_the_setting_names_the_socket():
    assert socket_for("off") is None
    assert (
        socket_for("auto", {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
        == "/var/lib/kubelet/pod-resources/kubelet.sock"
    )
    assert socket_for("/run/k/kubelet.sock") == "/run/k/kubelet.sock"


def test_the_agent_reads_the_setting_and_wraps_its_source_only_when_asked():
    config = load_config({}, environ={"GREENOPS_POD_RESOURCES": "/run/k/kubelet.sock"})
    assert config.pod_resources == "/run/k/kubelet.sock"
    assert load_config({}, environ={}).pod_resources == "auto"
    nvml = Nvml()
    assert pod_source(nvml, "off") is nvml
    wrapped = pod_source(nvml, config.pod_resources)
    assert (
        isinstance(wrapped, WithPods) and wrapped.attribution.socket_path == "/run/k/kubelet.sock"
    )
    assert wrapped.processes(0) == [(4242, 30_000.0)]  # NVML's processes still reach the server
