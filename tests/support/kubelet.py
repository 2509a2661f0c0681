"""A fake kubelet for the agent's PodResources client: a real gRPC server on a unix socket in a
short temp dir (socket paths stop at 107 bytes) that speaks v1.PodResourcesLister
(collectors/podresources_v1), answering what the test sets, shaped as the NVIDIA, AMD and
Neuron device plugins fill it."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from concurrent import futures

import grpc

from collectors.podresources_v1 import api_pb2, api_pb2_grpc


def pod(namespace: str, name: str, *containers) -> api_pb2.PodResources:
    return api_pb2.PodResources(name=name, namespace=namespace, containers=list(containers))


def ctr(name: str, resource: str = "", *ids: str) -> api_pb2.ContainerResources:
    devs = (
        [
            api_pb2.ContainerDevices(
                resource_name=resource,
                device_ids=list(ids),
                topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=0)]),
            )
        ]
        if resource
        else []
    )
    return api_pb2.ContainerResources(name=name, devices=devs)


def answer(*pods) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(pod_resources=list(pods))


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.answer = api_pb2.ListPodResourcesResponse()
        self.calls = 0
        self.folder = tempfile.mkdtemp(prefix="kubelet-", dir="/tmp")
        self.path = os.path.join(self.folder, "kubelet.sock")
        self._server: grpc.Server | None = None
        self._dead: socket.socket | None = None

    def List(self, request, context):  # noqa: N802 - the RPC's name
        self.calls += 1
        return self.answer

    def start(self) -> FakeKubelet:
        if self._dead is not None:  # a restarted kubelet replaces its socket file
            self._dead.close()
            self._dead = None
            os.unlink(self.path)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix:{self.path}")
        self._server.start()
        return self

    def stop(self) -> None:
        """The kubelet goes down: its socket file stays (bound, nobody listening)."""
        assert self._server is not None
        self._server.stop(None).wait()
        self._server = None
        self._dead = socket.socket(socket.AF_UNIX)
        self._dead.bind(self.path)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop(None).wait()
        if self._dead is not None:
            self._dead.close()
        shutil.rmtree(self.folder, ignore_errors=True)
