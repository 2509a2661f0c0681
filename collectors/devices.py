"""Accelerators other than NVML's GPUs (issue 33): ``device_source`` picks one per host.

``nvml`` (the default) keeps the NVML / dcgm-exporter path of collectors/dcgm.py; the others
open the tool that reads their devices. Each source tells the server its devices' kind and
vendor in the inventory (GpuInfo.kind / vendor) and names itself in every batch's ``source``.
"""

from __future__ import annotations

from collectors.amd import AmdSmiSource, AmdUnavailable
from collectors.jetson import JetsonSource, JetsonUnavailable
from collectors.neuron import NeuronSource, NeuronUnavailable
from collectors.sources import GpuSource
from collectors.streamed import StreamUnavailable

DEVICE_SOURCES = ("nvml", "amd", "neuron", "jetson")
# neuron-monitor with no config file reports every metric group every 5 s; tegrastats every
# --interval ms (1 s here, the agent's default sampling interval).
NEURON_ARGV = ("neuron-monitor",)
TEGRASTATS_ARGV = ("tegrastats", "--interval", "1000")


class DeviceUnavailable(RuntimeError):
    """The configured device source cannot read any device on this host."""


def open_device_source(name: str, max_power_w: float | None = None) -> GpuSource:
    """The source for ``device_source = name`` (not "nvml"); raises DeviceUnavailable."""
    try:
        if name == "amd":
            return AmdSmiSource()
        if name == "neuron":
            return NeuronSource(NEURON_ARGV, max_power_w=max_power_w)
        if name == "jetson":
            return JetsonSource(TEGRASTATS_ARGV)
    except (AmdUnavailable, NeuronUnavailable, JetsonUnavailable, StreamUnavailable) as exc:
        raise DeviceUnavailable(f"device_source = {name!r}: {exc}") from exc
    raise DeviceUnavailable(f"device_source must be one of {', '.join(DEVICE_SOURCES)}")
