"""Which channels besides GPU sampling a configuration asks for: CPU/RAM energy through
codecarbon, and inference-server scraping. Each has its own thread and endpoint; see
collectors/host_energy.py and collectors/scrape.py."""

from __future__ import annotations

import functools
import logging
from typing import Any

from collectors.agent import Channel
from collectors.config import AgentConfig
from collectors.host_activity import HostActivityChannel, gpu_processes
from collectors.host_energy import CodecarbonSource, HostEnergyChannel, codecarbon_installed
from collectors.podresources import pod_source
from collectors.scrape import ScrapeChannel

log = logging.getLogger(__name__)


def build_channels(config: AgentConfig, simulated: bool = False,
                   source: Any = None) -> list[Channel]:
    channels: list[Channel] = []
    if config.host_samples == "on" and not simulated:
        # Real host counters beside simulated GPUs would make a demo half real.
        procs = None
        if source is not None:
            indexes = [g.index for g in source.gpus()]
            procs = functools.partial(gpu_processes, pod_source(source, config.pod_resources),
                                      indexes)
        channels.append(HostActivityChannel(interval_s=config.host_sample_interval,
                                            processes=procs))
    if config.host_energy == "codecarbon":
        if simulated:
            # Real CPU/RAM figures beside simulated GPUs would make a demo half real.
            log.info("CPU/RAM energy is off with --simulate")
        elif not codecarbon_installed():
            log.info("CPU/RAM energy is off: codecarbon is not installed "
                     "(pip install codecarbon to turn it on)")
        else:
            channels.append(HostEnergyChannel(CodecarbonSource.detect,
                                              config.host_energy_interval))
    servers = [t for t in config.scrape if t.kind != "dcgm"]  # dcgm: a GPU source (cli.py)
    if servers:
        channels.append(ScrapeChannel(servers, config.scrape_interval))
        log.info("scraping %d inference server(s) every %gs", len(servers),
                 config.scrape_interval)
    return channels
