"""Which Kubernetes pod and container holds each GPU, from the kubelet's PodResources API.

The kubelet serves ``v1.PodResourcesLister/List`` (gRPC) on a unix socket,
``/var/lib/kubelet/pod-resources/kubelet.sock``: every running pod, its containers and, per
container, the devices its device plugins allocated (``resource_name`` and ``device_ids``).
dcgm-exporter reads the same socket to label its series with pods; the agent does it itself so
a node without dcgm-exporter is attributed too. The DaemonSet mounts the directory read-only
(deploy/kubernetes/daemonset.yaml).

Device ids are matched to the GPU source's inventory:

* ``nvidia.com/gpu``: the GPU UUID (``GPU-8f6c...``), as NVML reports it.
* MIG (``nvidia.com/mig-<profile>``, or ``nvidia.com/gpu`` under the device plugin's
  ``single`` strategy): the old id ``MIG-GPU-<uuid>/<gi>/<ci>`` names its parent GPU; a new
  ``MIG-<uuid>`` id is matched through ``aliases`` (MIG UUID -> parent UUID) when the source
  gives them, else it is reported as unknown. The GPU's energy goes to every pod holding a
  slice of it, in equal parts (the server splits a GPU-hour between simultaneous holders).
* ``amd.com/gpu`` and ``aws.amazon.com/neuron*``: passed through the same way -- matched to the
  source's UUID, its index (the Neuron device plugin's ids are device indexes) or an alias (the
  AMD plugin's PCI bus ids), so the sources for those accelerators only have to name them.

A device id the node's source does not have is counted in :attr:`PodAttribution.unknown` and
logged once; it is never attributed to a GPU by guesswork. A missing socket, a kubelet that
does not answer, or an agent installed without grpcio make :meth:`PodAttribution.pods` return
None with the reason in :attr:`PodAttribution.status`: the agent keeps sampling GPUs, and the
server books the time as held by no pod seen.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

try:  # the agent's optional `kubernetes` extra: pip install "greenops-agent[kubernetes]"
    import grpc

    from collectors.podresources_v1 import api_pb2, api_pb2_grpc
except ImportError:  # pragma: no cover - exercised where the extra is not installed
    grpc = api_pb2 = api_pb2_grpc = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

SOCKET_PATH = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
DEFAULT_TIMEOUT_S = 2.0
# Device-plugin resources that are accelerators; anything else (SR-IOV NICs, hugepages...) is
# not a GPU and is skipped.
RESOURCES = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neurondevice",
    "aws.amazon.com/neuroncore",
)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MAX_ALLOCATIONS = 4096  # a node has at most a few hundred pods; more is a hostile answer


class PodResourcesUnavailable(RuntimeError):
    """The kubelet's answer could not be had; the message says why."""


@dataclass(frozen=True)
class Allocation:
    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str


def is_accelerator(resource: str) -> bool:
    return resource in RESOURCES or resource.startswith(MIG_RESOURCE_PREFIX)


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def list_allocations(
    socket_path: str = SOCKET_PATH, timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[Allocation]:
    """One ``List`` call: the accelerator devices allocated to each pod's containers."""
    if grpc is None:
        raise PodResourcesUnavailable(
            'grpcio is not installed (pip install "greenops-agent[kubernetes]")'
        )
    if not _is_socket(socket_path):
        raise PodResourcesUnavailable(
            f"no kubelet socket at {socket_path} (is /var/lib/kubelet/pod-resources mounted?)"
        )
    try:
        # Each call's own subchannel: gRPC shares subchannels (and their reconnect backoff,
        # up to 120 s) between channels to one address, so after a kubelet restart a new
        # channel still failed at once with UNAVAILABLE until the backoff ran out; a local
        # pool connects afresh, and attribution resumes at the next poll.
        with grpc.insecure_channel(f"unix://{socket_path}",
                                   options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            answer = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "error"
        raise PodResourcesUnavailable(
            f"the kubelet at {socket_path} did not answer ({code})"
        ) from None
    return allocations(answer)


def allocations(answer: Any) -> list[Allocation]:
    """The accelerator devices of a ListPodResourcesResponse, at most MAX_ALLOCATIONS."""
    out: list[Allocation] = []
    for pod in answer.pod_resources:
        for container in pod.containers:
            for dev in container.devices:
                if not is_accelerator(dev.resource_name):
                    continue
                for device_id in dev.device_ids:
                    if len(out) >= MAX_ALLOCATIONS:
                        log.warning(
                            "the kubelet listed more than %d devices; the rest are not attributed",
                            MAX_ALLOCATIONS,
                        )
                        return out
                    out.append(
                        Allocation(
                            pod.namespace, pod.name, container.name, dev.resource_name, device_id
                        )
                    )
    return out


def parent_uuid(device_id: str) -> str:
    """The GPU a device id names: ``MIG-GPU-<uuid>/<gi>/<ci>`` -> ``GPU-<uuid>``; any other id
    is itself."""
    if device_id.startswith("MIG-GPU-"):
        return device_id[len("MIG-") :].split("/", 1)[0]
    return device_id


class PodAttribution:
    """Per GPU index, the (namespace, pod, container) that hold it, as the kubelet says now."""

    def __init__(
        self,
        gpus: Iterable[Any],
        socket_path: str = SOCKET_PATH,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        aliases: dict[str, str] | None = None,
        lister: Callable[[str, float], list[Allocation]] = list_allocations,
    ) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self.lister = lister
        self._by_id: dict[str, int] = {}
        for g in gpus:
            self._by_id[str(g.uuid).lower()] = g.index
        for alias, uuid in (aliases or {}).items():
            if uuid.lower() in self._by_id:
                self._by_id[alias.lower()] = self._by_id[uuid.lower()]
        self._indexes = {g for g in self._by_id.values()}
        self.status = "not read yet"
        self.unknown: set[str] = set()

    def _index(self, a: Allocation) -> int | None:
        found = self._by_id.get(parent_uuid(a.device_id).lower())
        if (
            found is None
            and a.resource.startswith("aws.amazon.com/neuron")
            and a.device_id.isdigit()
            and int(a.device_id) in self._indexes
        ):
            found = int(a.device_id)
        return found

    def pods(self) -> dict[int, set[tuple[str, str, str]]] | None:
        """GPU index -> holders; {} when no pod holds a GPU; None when the kubelet could not be
        asked (the reason is in ``status``)."""
        try:
            found = self.lister(self.socket_path, self.timeout_s)
        except PodResourcesUnavailable as exc:
            if self.status != str(exc):
                log.warning("pod attribution paused: %s; GPU sampling goes on", exc)
            self.status = str(exc)
            return None
        if self.status != "ok":
            log.info("pod attribution: reading the kubelet at %s", self.socket_path)
        self.status = "ok"
        out: dict[int, set[tuple[str, str, str]]] = {}
        for a in found:
            index = self._index(a)
            if index is None:
                if a.device_id not in self.unknown:
                    log.warning(
                        "pod %s/%s holds %s %s, which this node's GPU source does "
                        "not list; not attributed",
                        a.namespace,
                        a.pod,
                        a.resource,
                        a.device_id,
                    )
                self.unknown.add(a.device_id)
                continue
            out.setdefault(index, set()).add((a.namespace, a.pod, a.container))
        return out


class WithPods:
    """A GPU source seen through the kubelet: NVML's processes as the source gives them, and
    its pods (dcgm-exporter's, where it has them) together with the kubelet's. What
    collectors.host_activity.gpu_processes reads."""

    def __init__(self, source: Any, attribution: PodAttribution) -> None:
        self.source = source
        self.attribution = attribution
        by_pid = getattr(source, "processes", None)
        if by_pid is None and hasattr(source, "source"):  # the DCGM overlay wraps NVML
            by_pid = getattr(source.source, "processes", None)
        if by_pid is not None:
            self.processes = by_pid

    def pods(self) -> dict[int, set[tuple[str, str, str]]]:
        inner = getattr(self.source, "pods", None)
        merged = {i: set(p) for i, p in (inner() if inner is not None else {}).items()}
        for index, holders in (self.attribution.pods() or {}).items():
            merged.setdefault(index, set()).update(holders)
        return merged


def socket_for(setting: str, environ: dict[str, str] | None = None) -> str | None:
    """The socket the ``pod_resources`` setting names: "off" -> None; "auto" -> the kubelet's
    default path when it is there or the agent runs in a pod (then a missing socket is worth a
    warning); anything else is the path itself."""
    environ = os.environ if environ is None else environ
    if setting == "off":
        return None
    if setting == "auto":
        if _is_socket(SOCKET_PATH) or "KUBERNETES_SERVICE_HOST" in environ:
            return SOCKET_PATH
        return None
    return setting


def pod_source(source: Any, setting: str) -> Any:
    """The source that collectors.host_activity.gpu_processes reads: ``source`` itself, or,
    where the kubelet's socket applies, ``source`` with the kubelet's pods."""
    path = socket_for(setting)
    if path is None:
        return source
    return WithPods(source, PodAttribution(source.gpus(), path))
