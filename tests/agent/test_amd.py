"""AMD Instinct GPUs through amd-smi (issue 33): its JSON -> readings -> interval energy.

The answers in tests/data/amd_smi_*.json are laid out as amd-smi prints them for two MI300X:
``metric_1`` in ROCm 6.x's bare-array layout, ``metric_2`` and ``metric_3_reset`` in amd-smi
25.x's ``{"gpu_data": [...]}`` layout, 10 s apart; GPU 1 reports no ``umc_activity`` and
"N/A" for its edge sensor (as MI300 does); in ``metric_3_reset`` GPU 0's energy accumulator
restarted (driver reload). ``metric_truncated`` is ``metric_2`` cut a third of the way.

Hand-computed figures:
* GPU 0, metric 1: gfx clock (2,100 + 2,090) / 2 = 2,095 MHz; energy 1,234,567.89 J
  = 1,234,567,890 mJ.
* energy, GPU 0: 1 -> 2 the counter rose 1,240,717.89 - 1,234,567.89 = 6,150 J ("counter":
  under the 750 W cap x 10 s x 1.2 = 9,000 J); 2 -> 3 it fell to 12.345 J, so that interval
  is power x dt: (620 + 600) / 2 x 10 s = 6,100 J ("power").
  GPU 1: 51,550 - 50,000 = 1,550 J, then 53,200 - 51,550 = 1,650 J (both "counter").
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from collectors.amd import AmdSmiSource, AmdUnavailable, figure, gpu_list, reading
from collectors.energy import COUNTER, POWER, EnergyAccountant
from tests.support import DATA

METRICS = [
    (DATA / f"amd_smi_metric_{n}.json").read_text() for n in ("1", "2", "3_reset", "truncated")
]
STATIC = (DATA / "amd_smi_static.json").read_text()
LISTING = (DATA / "amd_smi_list.json").read_text()


class FakeAmdSmi:
    """Answers ``amd-smi <command> --json`` from canned output; metric answers in turn."""

    def __init__(self, *metrics: str, static: str = STATIC, listing: str = LISTING) -> None:
        self.metrics, self.static, self.listing = list(metrics), static, listing
        self.calls: list[str] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> str:
        assert argv[0] == "amd-smi" and argv[2] == "--json" and timeout_s > 0
        self.calls.append(argv[1])
        if argv[1] == "metric":
            if not self.metrics:
                raise AmdUnavailable("amd-smi metric --json exited 1")
            return self.metrics.pop(0)
        return {"static": self.static, "list": self.listing}[argv[1]]


def test_both_layouts_read_per_gpu_in_stored_units():
    first, second = gpu_list(json.loads(METRICS[0])), gpu_list(json.loads(METRICS[1]))
    assert [g["gpu"] for g in first] == [0, 1] == [g["gpu"] for g in second]
    r0, r1 = reading(first[0]), reading(first[1])
    assert (r0.util_pct, r0.mem_util_pct, r0.power_w) == (87.0, 41.0, 612.0)
    assert r0.energy_mj == 1_234_567_890
    assert (r0.mem_used_mib, r0.temp_c) == (120000.0, 71.0)  # hotspot: MI300 has no edge
    assert (r0.sm_clock_mhz, r0.mem_clock_mhz) == (2095.0, 1300.0)
    # GPU 1: umc_activity left out -> null, never 0.
    assert (r1.util_pct, r1.mem_util_pct, r1.power_w, r1.energy_mj) == (
        12.0,
        None,
        150.0,
        50_000_000,
    )


@pytest.mark.parametrize(
    "node, expected",
    [
        ({"value": 612, "unit": "W"}, 612.0),
        ({"value": 612000, "unit": "mW"}, 612.0),
        ({"value": "N/A", "unit": "W"}, None),
        ("N/A", None),
        ({"value": 612, "unit": "kW"}, None),  # a unit this reader does not know: not trusted
        ({"value": float("nan"), "unit": "W"}, None),
        ({"value": True, "unit": "W"}, None),
        (None, None),
    ],
)
def test_a_figure_is_its_value_in_its_unit_or_null(node, expected):
    assert figure(node, {"W": 1.0, "mW": 1e-3}) == expected


def test_hostile_values_become_null_not_a_refused_batch():
    g = {
        "gpu": 0,
        "usage": {"gfx_activity": {"value": 250, "unit": "%"}},
        "power": {"socket_power": {"value": -5, "unit": "W"}},
        "energy": {"total_energy_consumption": {"value": -1.0, "unit": "J"}},
        "temperature": {"hotspot": {"value": 1e9, "unit": "C"}},
    }
    r = reading(g)
    assert (r.util_pct, r.power_w, r.energy_mj, r.temp_c) == (None, None, None, None)


def test_inventory_names_the_gpus_as_amd_gpus():
    source = AmdSmiSource(run=FakeAmdSmi(METRICS[0]))
    gpus = source.gpus()
    assert [(g.index, g.uuid, g.name, g.power_limit_w, g.memory_total_mib) for g in gpus] == [
        (0, "54ff74a1-0000-1000-80ab-5d3a0c1e2b4f", "AMD Instinct MI300X", 750.0, 196592),
        (1, "a7ff74a1-0000-1000-80c4-5d3b1c2d3e5a", "AMD Instinct MI300X", 750.0, 196592),
    ]
    assert {(g.kind, g.vendor) for g in gpus} == {("gpu", "amd")}
    assert (gpus[0].max_sm_clock_mhz, gpus[0].max_mem_clock_mhz) == (2100.0, 1300.0)
    assert source.kind == "amd-smi"


def test_energy_from_the_accumulator_and_power_across_its_reset():
    fake = FakeAmdSmi(*METRICS[:3])
    source = AmdSmiSource(run=fake)
    gpus = source.gpus()
    acct = EnergyAccountant(max_gap_s=50.0, power_limit_w={g.index: g.power_limit_w for g in gpus})
    out = {0: [], 1: []}
    for t in (0.0, 10.0, 20.0):
        for i in (0, 1):
            r = source.read(i)
            out[i].append(acct.update(i, t, r.energy_mj, r.power_w))
    # One amd-smi call per tick answers for both GPUs: metric at start, then two more.
    assert fake.calls == ["metric", "static", "list", "metric", "metric"]
    assert out[0] == [(None, None), (pytest.approx(6150.0), COUNTER), (6100.0, POWER)]
    assert out[1] == [
        (None, None),
        (pytest.approx(1550.0), COUNTER),
        (pytest.approx(1650.0), COUNTER),
    ]


def test_truncated_garbled_or_failing_answers_give_no_reading_then_it_recovers():
    source = AmdSmiSource(
        run=FakeAmdSmi(METRICS[0], METRICS[3], "Warning: amdgpu not loaded", METRICS[1])
    )
    assert source.read(0) is not None and source.read(1) is not None
    assert source.read(0) is None and source.read(1) is None  # truncated JSON
    assert source.read(0) is None  # garbage on stdout
    r = source.read(0)
    assert r is not None and r.power_w == 620.0
    source2 = AmdSmiSource(run=FakeAmdSmi(METRICS[0]))
    source2.read(0)
    assert source2.read(0) is None  # amd-smi now exits 1: a tick without figures


def test_no_amd_smi_or_no_gpu_is_a_clear_refusal():
    with pytest.raises(AmdUnavailable):
        AmdSmiSource(run=FakeAmdSmi())  # the first metric call fails
    with pytest.raises(AmdUnavailable, match="listed no GPU"):
        AmdSmiSource(run=FakeAmdSmi("[]"))


def test_a_failed_static_call_still_lists_the_gpus_by_index():
    source = AmdSmiSource(run=FakeAmdSmi(METRICS[0], static="{", listing="oops"))
    assert [(g.index, g.uuid, g.name, g.power_limit_w) for g in source.gpus()] == [
        (0, "amd-gpu-0", "AMD GPU", None),
        (1, "amd-gpu-1", "AMD GPU", None),
    ]
