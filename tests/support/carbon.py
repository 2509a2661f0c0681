"""Carbon test helpers: codecarbon emissions.csv rows and API payloads, host-energy batches."""

from __future__ import annotations

import dataclasses
import importlib.util
import uuid

from greenops.carbon import intensity

BASE = "/api/codecarbon"
EXPERIMENT = "5b0fa12a-3dd7-45bb-9766-cc326314d9f1"  # codecarbon's default experiment_id
EXP = EXPERIMENT
RUN_A = "8a1b6c4e-1111-4d7a-9a64-0a5f3c2d1e01"
RUN_B = "8a1b6c4e-2222-4d7a-9a64-0a5f3c2d1e02"
HOUR = 3600.0
# codecarbon 2.8.4 writes EmissionsData fields in declaration order (pandas to_csv, NaN -> "").
V2_CSV = (
    "timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,cpu_power,"
    "gpu_power,ram_power,cpu_energy,gpu_energy,ram_energy,energy_consumed,country_name,"
    "country_iso_code,region,cloud_provider,cloud_region,os,python_version,codecarbon_version,"
    "cpu_count,cpu_model,gpu_count,gpu_model,longitude,latitude,ram_total_size,tracking_mode,"
    "on_cloud,pue\n"
    f"2026-11-29T12:00:00,codecarbon,{RUN_A},{EXP},600.5,0.05,8.3e-05,42.5,300.0,11.8,0.007,"
    "0.05,0.002,0.059,Germany,DEU,hesse,,,Linux-6.8,3.11.7,2.8.4,32,AMD EPYC 7543,1,"
    "1 x NVIDIA A100,8.7,50.1,31.4,machine,N,1.0\n"
    f"2026-11-29T13:00:00,codecarbon,{RUN_B},{EXP},120.0,0.01,8.3e-05,42.5,0.0,11.8,0.0014,"
    "0.0,0.0004,0.0018,Germany,DEU,hesse,,,Linux-6.8,3.11.7,2.8.4,32,AMD EPYC 7543,,,8.7,50.1,"
    "31.4,machine,N,1.0\n"
    # RUN_A stopped again later: its totals grew; this row is the run.
    f"2026-11-29T14:00:00,codecarbon,{RUN_A},{EXP},900.0,0.08,8.9e-05,42.5,300.0,11.8,0.0105,"
    "0.075,0.003,0.0885,Germany,DEU,hesse,,,Linux-6.8,3.11.7,2.8.4,32,AMD EPYC 7543,1,"
    "1 x NVIDIA A100,8.7,50.1,31.4,machine,N,1.0\n"
)







def _replace_cell(text: str, line: int, column: str, value: str) -> str:
    lines = text.splitlines()
    header = lines[0].split(",")
    cells = lines[line - 1].split(",")
    cells[header.index(column)] = value
    lines[line - 1] = ",".join(cells)
    return "\n".join(lines) + "\n"




def run_payload(experiment_id: str = EXPERIMENT) -> dict:
    # As ApiClient._create_run builds it (codecarbon 3.3).
    return dataclasses.asdict(schemas.RunCreate(
        timestamp="2026-11-30T10:00:00.123456+01:00", experiment_id=experiment_id,
        os="Linux-6.8.0-x86_64-with-glibc2.39", python_version="3.11.7",
        codecarbon_version="3.3.2", cpu_count=32, cpu_model="AMD EPYC 7543 32-Core Processor",
        gpu_count=1, gpu_model="1 x NVIDIA A100-SXM4-40GB", longitude=None, latitude=None,
        region="virginia", provider="aws", ram_total_size=251.5, tracking_mode="machine",
    ))


def emission_payload(run_id: str, ts: str, **energy) -> dict:
    values = dict(duration=60, emissions_sum=0.0125, emissions_rate=0.0125 / 60,
                  cpu_power=42.5, gpu_power=250.0, ram_power=20.0, cpu_energy=0.0007,
                  gpu_energy=0.004, ram_energy=0.0003, energy_consumed=0.005,
                  cpu_utilization_percent=35.0, gpu_utilization_percent=97.0,
                  ram_utilization_percent=12.0, wue=0)
    values.update(energy)
    return dataclasses.asdict(schemas.EmissionCreate(timestamp=ts, run_id=run_id, **values))


def hour_start(now: float) -> float:
    # A whole hour two hours back, so samples never fall in the future.
    return (int(now // HOUR) - 2) * HOUR


def energy_batch(ts: list[float], cpu_method="rapl", ram_method="model", **overrides) -> dict:
    n = len(ts)
    doc = {
        "batch_id": str(uuid.uuid4()), "agent_version": "0.3.0", "source": "codecarbon",
        "codecarbon_version": "3.3.2", "tracking_mode": "machine",
        "samples": {
            "ts": ts,
            "cpu_power_w": [40.0] * n, "cpu_energy_j": [600.0] * n,
            "ram_power_w": [6.0] * n, "ram_energy_j": [90.0] * n,
            "cpu_method": [cpu_method] * n, "ram_method": [ram_method] * n,
        },
    }
    doc.update(overrides)
    return doc








def load_schemas():
    path = intensity.codecarbon_dir() / "core" / "schemas.py"
    spec = importlib.util.spec_from_file_location("codecarbon_schemas_for_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


schemas = load_schemas()


