"""NVIDIA Jetson modules through tegrastats (issue 33): lines of three JetPack generations ->
one reading of the module; energy is integrated power, labelled "power".

tests/data/tegrastats_orin.txt: an AGX Orin under JetPack 5/6 (timestamp first, rails in
mW as current/average), idle then loaded, then tegrastats' own error message and a line cut
short. tegrastats_xavier.txt: JetPack 4 on Xavier (rails without unit). tegrastats_nano.txt:
JetPack 4 on a Nano (POM_ rails, ``GR3D_FREQ 0%`` without a clock when idle).

Hand-computed figures:
* Orin line 1: power = VDD_GPU_SOC 3,187 + VDD_CPU_CV 796 + VIN_SYS_5V0 4,038 +
  VDDQ_VDD2_1V8AO 503 = 8,524 mW (no input rail on AGX Orin: the rails are summed, current
  figures, not the averages); GPU clock (305 + 305) / 2 = 305 MHz.
* line 2: 28,760 + 5,980 + 6,120 + 1,540 = 42,400 mW; clock (1,300 + 1,296) / 2 = 1,298.
* line 3: 27,160 + 6,010 + 6,080 + 1,510 = 40,760 mW.
* energy 1 s apart: (8.524 + 42.4) / 2 = 25.462 J, then (42.4 + 40.76) / 2 = 41.58 J.
* Nano: the input rail POM_5V_IN alone, 2,086 mW then 6,420 mW.
* Xavier: GPU 1,240 + CPU 621 + SOC 1,448 + CV 0 + VDDRQ 207 + SYS5V 1,848 = 5,364 mW.
"""

from __future__ import annotations

import pytest

from collectors.energy import POWER, EnergyAccountant
from collectors.jetson import JetsonSource, board_model, parse_line
from tests.support import DATA

ORIN = (DATA / "tegrastats_orin.txt").read_text().splitlines()
NANO = (DATA / "tegrastats_nano.txt").read_text().splitlines()
XAVIER = (DATA / "tegrastats_xavier.txt").read_text().splitlines()


def test_orin_lines():
    r = parse_line(ORIN[0])
    assert (r.util_pct, r.sm_clock_mhz, r.mem_used_mib, r.temp_c) == (0.0, 305.0, 2448.0, 41.5)
    assert r.power_w == pytest.approx(8.524)
    assert r.energy_mj is None  # no energy counter on a Jetson
    r = parse_line(ORIN[1])
    assert (r.util_pct, r.sm_clock_mhz, r.mem_used_mib) == (98.0, 1298.0, 9120.0)
    assert r.power_w == pytest.approx(42.4)
    assert parse_line(ORIN[2]).power_w == pytest.approx(40.76)


def test_error_messages_and_cut_lines_are_skipped():
    assert parse_line(ORIN[3]) is None  # "tegrastats: unable to open ..."
    assert parse_line(ORIN[4]) is None  # cut after CPU [...
    assert parse_line("") is None
    assert parse_line("\x00\xff garbage GR3D") is None


def test_older_jetpack_layouts():
    nano0, nano1 = parse_line(NANO[0]), parse_line(NANO[1])
    assert (nano0.util_pct, nano0.sm_clock_mhz, nano0.temp_c) == (0.0, None, 26.0)
    assert nano0.power_w == pytest.approx(2.086)  # the input rail, not a sum with its parts
    assert (nano1.util_pct, nano1.sm_clock_mhz) == (99.0, 921.0)
    assert nano1.power_w == pytest.approx(6.42)
    x = parse_line(XAVIER[0])
    assert (x.util_pct, x.sm_clock_mhz, x.mem_used_mib, x.temp_c) == (57.0, 318.0, 3890.0, 37.0)
    assert x.power_w == pytest.approx(5.364)


def test_no_gpu_temperature_reading_is_null():
    line = ORIN[0].replace("GPU@41.5C", "GPU@-256C")
    assert parse_line(line).temp_c is None


def test_the_module_is_one_edge_device_with_integrated_energy():
    source = JetsonSource(model="NVIDIA Jetson AGX Orin 64GB")
    assert source.feed(ORIN[3]) is False
    acct = EnergyAccountant(max_gap_s=5.0)
    out = []
    for t, line in enumerate(ORIN[:3]):
        assert source.feed(line) is True
        r = source.read(0)
        out.append(acct.update(0, float(t), r.energy_mj, r.power_w))
        assert source.read(0) is None  # the same line is not read twice
    assert out == [(None, None), (pytest.approx(25.462), POWER), (pytest.approx(41.58), POWER)]
    [g] = source.gpus()
    assert (g.index, g.name, g.memory_total_mib, g.kind, g.vendor) == (
        0,
        "NVIDIA Jetson AGX Orin 64GB",
        62840,
        "edge-soc",
        "nvidia",
    )
    assert source.kind == "tegrastats"


def test_board_model_from_the_device_tree(tmp_path):
    path = tmp_path / "model"
    path.write_bytes(b"NVIDIA Jetson AGX Orin Developer Kit\x00")
    assert board_model(path) == "NVIDIA Jetson AGX Orin"
    assert board_model(tmp_path / "missing") == "NVIDIA Jetson"
