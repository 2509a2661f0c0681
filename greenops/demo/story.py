"""The demo's fleet and what it does, hour by hour: real instance types, real boards, and
workloads whose shape a team would recognise. Everything here is simulated and says so.

No Django here: the live agents (`python -m greenops.demo.agent`) import this module to draw the
same curves the backfilled history was drawn from, so the history and the live data join up.

The story:
- ML Platform trains on one p5.48xlarge (8x H100 SXM, 700 W each) in 6-hour blocks: a fifth of
  the blocks nothing runs (data preparation, waiting on review), a third run on half the GPUs.
  The idle GPU-hours are the idle cost the home page leads with; the training is checkpointed,
  so spot is on the table.
- ML Platform serves a Llama 3.1 8B chat model with vLLM on one g6e.12xlarge (4x L40S, 350 W
  each) around the clock, busiest in the US afternoon.
- Research left a g6e.xlarge (1x L40S) running after its last experiment four days before the
  demo started: a GPU billed by the hour that does nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from collectors.simulated import H100_SXM, L40S, GpuModel, SimulatedSource, unit

HOUR_S = 3600
DAY_S = 86400
BLOCK_S = 6 * HOUR_S  # one training run


@dataclass(frozen=True)
class DemoHost:
    team: str  # team slug
    name: str
    instance_type: str
    region: str
    gpus: int
    model: GpuModel
    story: str  # "training", "serving" or "dev"
    seed: int
    workload: str = ""  # the inference workload a serving host reports for
    replies_per_gpu_s: float = 12.0  # replies per second of one accelerator at full load
    unloaded_reply_ms: float = 1000.0  # median reply time when the accelerator is idle
    note: str = ""  # what is estimated about this host, said on its workload
    site: str = ""  # the facility it runs in (greenops.demo.seed.SITES); "" the AWS region's
    p99_target_ms: float | None = None  # the service's p99 reply-time target, if it has one


# Instance types and boards as AWS sells them: p5.48xlarge = 8x H100 80GB SXM,
# g6e.12xlarge = 4x L40S 48GB, g6e.xlarge = 1x L40S.
# Host names as an ML platform team names its machines: accelerator, role, number, region,
# the team's internal domain.
HOSTS = (
    DemoHost(
        "ml-platform",
        "h100-train-01.use1.ml.internal",
        "p5.48xlarge",
        "us-east-1",
        8,
        H100_SXM,
        "training",
        1,
    ),
    DemoHost(
        "ml-platform",
        "l40s-serve-01.use1.ml.internal",
        "g6e.12xlarge",
        "us-east-1",
        4,
        L40S,
        "serving",
        2,
        workload="chat-llm",
    ),
    DemoHost(
        "research",
        "l40s-dev-03.use1.research.internal",
        "g6e.xlarge",
        "us-east-1",
        1,
        L40S,
        "dev",
        3,
    ),
)

# The mixed-accelerator inference fleet (issue 33): Llama 3.1 8B Instruct served on three kinds
# of accelerator, and one edge box. Boards as their vendors publish them: H100 SXM5 80GB
# 700 W; AMD Instinct MI300X 192 GB 750 W; NVIDIA Jetson AGX Orin 64GB, 15-60 W power modes.
# AWS publishes no device power for an Inferentia2 chip: 75 W here is an estimate (inf2.xlarge:
# one chip, 32 GB), labelled so on the workload.
H100_SXM5 = GpuModel("NVIDIA H100 SXM5 80GB", 700.0, 70.0, 81559, 345.0, 1980.0)
MI300X = GpuModel("AMD Instinct MI300X", 750.0, 140.0, 196608, 1000.0, 2100.0)
INFERENTIA2 = GpuModel("AWS Inferentia2", 75.0, 18.0, 32768, 1000.0, 1400.0)
JETSON_ORIN = GpuModel("NVIDIA Jetson AGX Orin 64GB", 60.0, 15.0, 65536, 306.0, 1300.0)
FLEET_TEAM = "inference"
FLEET_MODEL = "llama-3.1-8b-instruct"
# Replies per second per accelerator at full load, 180 output tokens each, vLLM (Neuron on
# Inferentia2, llama.cpp int4 on the Orin): an H100 serves ~2.5x an L40S, an MI300X about as
# many, one Inferentia2 chip a third of an L40S, an Orin one reply every few seconds.
FLEET_HOSTS = (
    # In Oregon (us-west-2: the same p5 price as us-east-1 on a cleaner grid), with a p99 reply
    # time target of 4 s for a 180-token reply: met most of the day, missed in the hours around
    # the peak (median ~1.1 s, p99 ~4.2 s) -- so the replica advice sizes the peak from the
    # busiest hour that met it.
    DemoHost(
        FLEET_TEAM,
        "h100-infer-02.usw2.ml.internal",
        "p5.48xlarge",
        "us-west-2",
        8,
        H100_SXM5,
        "serving",
        11,
        workload="llama-8b-h100",
        replies_per_gpu_s=30.0,
        unloaded_reply_ms=600.0,
        p99_target_ms=4000.0,
    ),
    # Bought outright and racked in a colocation facility in Ashburn, Virginia: the cheapest
    # per reply (no cloud margin), on Virginia's grid.
    DemoHost(
        FLEET_TEAM,
        "mi300x-infer-01.colo-ash1.ml.internal",
        "",
        "us-east-1",
        8,
        MI300X,
        "serving",
        12,
        workload="llama-8b-mi300x",
        replies_per_gpu_s=28.0,
        unloaded_reply_ms=650.0,
        site="colo-ashburn",
    ),
    DemoHost(
        FLEET_TEAM,
        "inf2-infer-01.use1.ml.internal",
        "inf2.xlarge",
        "us-east-1",
        1,
        INFERENTIA2,
        "serving",
        13,
        workload="llama-8b-inf2",
        replies_per_gpu_s=4.0,
        unloaded_reply_ms=1400.0,
        note="device power of an Inferentia2 chip is not published: 75 W is an estimate",
    ),
    DemoHost(
        FLEET_TEAM,
        "orin-edge-0147.store.edge.internal",
        "",
        "us-east-1",
        1,
        JETSON_ORIN,
        "serving",
        14,
        workload="llama-8b-orin-edge",
        replies_per_gpu_s=0.4,
        unloaded_reply_ms=7000.0,
        site="edge-store",
    ),
)
BY_NAME = {h.name: h for h in HOSTS + FLEET_HOSTS}

# The research box's last experiment ended this long before the demo started.
DEV_IDLE_FOR_S = 4 * DAY_S
US_EAST_UTC_OFFSET_H = -5


def local_hour(t: float) -> float:
    return (t / HOUR_S + US_EAST_UTC_OFFSET_H) % 24


def chat_load(t: float) -> float:
    """Share of seconds a serving GPU is busy: 15 % at 4 am, 85 % at 4 pm (US East)."""
    return 0.15 + 0.70 * (0.5 - 0.5 * math.cos(2 * math.pi * (local_hour(t) - 4) / 24))


class StorySource(SimulatedSource):
    """A simulated host that follows its story instead of random two-minute phases."""

    def __init__(self, host: DemoHost, clock: Callable[[], float], idle_since: float) -> None:
        super().__init__(host.gpus, seed=host.seed, clock=clock, model=host.model)
        self.host = host
        self.idle_since = idle_since

    def phase(self, index: int, t: float) -> str:
        if self.host.story == "serving":
            return "inference"
        if self.host.story == "training":
            u = unit(self.host.seed, int(t // BLOCK_S), 11)
            if u < 0.2:
                return "idle"
            if u < 0.55:  # a run on half the board
                return "training" if index < self.host.gpus // 2 else "idle"
            return "training"
        # dev: an afternoon experiment on about half the weekdays, until it was left idle
        day = int(t // DAY_S)
        weekday = (day + 3) % 7  # 1970-01-01 was a Thursday; 0 = Monday
        working = weekday < 5 and 10 <= local_hour(t) < 17
        if t < self.idle_since and working and unit(self.host.seed, day, 13) < 0.5:
            return "training"
        return "idle"

    def utilisation(self, index: int, t: float) -> float:
        if self.host.story != "serving":
            return super().utilisation(index, t)
        second = int(t)
        noise = unit(self.host.seed, index, second, 3)
        busy = unit(self.host.seed, index, second // 3, 4) < chat_load(t)
        return 55.0 + 40.0 * noise if busy else 2.0 + 8.0 * noise


# vLLM serving Llama 3.1 8B on an L40S: about 12 replies/s per GPU at full load, 180 output
# tokens each; at ~290 W per busy GPU that is ~25 J per reply (~0.14 J per token), in the
# range published for 8B models on this class of GPU.
REPLIES_PER_GPU_S = 12.0
TOKENS_PER_REPLY = 180
LATENCY_LE_MS = [50, 100, 250, 500, 1000, 2500, 5000, 10000, 20000, 40000]
CHAT_WORKLOAD = "chat-llm"


def _lognormal_cdf(x: float, median: float, sigma: float) -> float:
    return 0.5 * (1 + math.erf(math.log(x / median) / (sigma * math.sqrt(2))))


def chat_median_ms(load: float, unloaded_ms: float = 1000.0) -> float:
    """Median reply time: ~1 s for 180 tokens unloaded (on an L40S), doubling as batches
    fill."""
    return unloaded_ms * (1 + load)


def chat_windows(source: StorySource, start: float, end: float, step_s: float) -> list[dict]:
    """Inference windows of the chat service, following its GPUs' utilisation (sampled every
    10 s), with a log-normal latency histogram whose median rises with load."""
    windows, t = [], start
    while t + step_s <= end:
        samples = [
            source.utilisation(i, t + s)
            for i in range(source.host.gpus)
            for s in range(0, int(step_s), 10)
        ]
        busy = sum(samples) / len(samples) / 100  # mean utilisation of the serving GPUs
        requests = int(busy * source.host.replies_per_gpu_s * source.host.gpus * step_s)
        median = chat_median_ms(busy, source.host.unloaded_reply_ms)
        cdf = [_lognormal_cdf(b, median, 0.5) for b in LATENCY_LE_MS]
        counts = [round(requests * c) for c in cdf] + [requests]  # cumulative, last = +Inf
        windows.append(
            {
                "workload": source.host.workload or CHAT_WORKLOAD,
                "start": t,
                "end": t + step_s,
                "requests": requests,
                "success": requests,
                "failure": 0,
                "tokens": requests * TOKENS_PER_REPLY,
                "latency": {
                    "unit": "ms",
                    "le": LATENCY_LE_MS,
                    "counts": counts,
                    "cumulative": True,
                },
            }
        )
        t += step_s
    return windows


def chat_latencies_ms(source: StorySource, t: float, n: int) -> list[float]:
    """n reply times for the live client, log-normal around the load's median."""
    median = chat_median_ms(
        sum(source.utilisation(i, t) for i in range(source.host.gpus)) / source.host.gpus / 100
    )
    out = []
    for k in range(n):
        # Box-Muller from the deterministic unit hash: the same second draws the same replies.
        u1 = max(unit(source.host.seed, int(t), k, 21), 1e-12)
        u2 = unit(source.host.seed, int(t), k, 22)
        z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        out.append(median * math.exp(0.5 * z))
    return out


def training_runs(host: DemoHost, start: float, end: float) -> list[tuple[float, float, int]]:
    """(start, end, GPUs) of each training block of the training host in [start, end)."""
    runs = []
    block = int(start // BLOCK_S) + 1
    while (block + 1) * BLOCK_S <= end:
        u = unit(host.seed, block, 11)
        if u >= 0.2:
            runs.append(
                (block * BLOCK_S, (block + 1) * BLOCK_S, host.gpus // 2 if u < 0.55 else host.gpus)
            )
        block += 1
    return runs
