"""AWS Inferentia and Trainium through neuron-monitor (issue 33): report lines -> readings per
Neuron device; power from the driver's sysfs share of the device maximum, integrated.

tests/data/neuron_monitor_inf2.jsonl is neuron-monitor's output on an inf2.xlarge (one
Inferentia2, two NeuronCores) as its user guide lays the report out: a banner line that is not
JSON, three reports of the "bert-serve" runtime (the third with the runtime's error and no
report), a report cut in half, and a report with no Neuron application running.

Hand-computed figures:
* report 1: cores 80 % and 40 % -> device (80 + 40) / 2 = 60 %; memory per core 1 GiB
  constants + 100 MiB code + 20 MiB tensors = 1,144 MiB, x 2 cores = 2,288 MiB.
* report 2: only core 0 in use at 90 % -> (90 + 0) / 2 = 45 %.
* report 3: the runtime's data failed -> utilisation and memory unknown (null), not 0.
* report 5: no runtime -> 0 % and 0 MiB.
* sysfs ``POWER_STATUS_VALID,1764864000,20.00,35.00,27.50`` with a 400 W maximum: 27.5 % x
  400 W = 110 W; two readings 5 s apart -> (110 + 110) / 2 x 5 = 550 J, method "power".
"""

from __future__ import annotations

import pytest

from collectors.energy import POWER, EnergyAccountant
from collectors.neuron import Hardware, NeuronSource, parse_report, sysfs_power_w
from tests.support import DATA

LINES = (DATA / "neuron_monitor_inf2.jsonl").read_text().splitlines()
TS = 1764864000
VALID = f"POWER_STATUS_VALID,{TS},20.00,35.00,27.50\n"


def test_reports_become_one_reading_per_device():
    source = NeuronSource()
    assert source.feed(LINES[0]) is False  # the banner
    assert source.gpus() == []
    assert source.feed(LINES[1]) is True
    gpus = source.gpus()
    assert [(g.index, g.uuid, g.name, g.memory_total_mib, g.kind, g.vendor) for g in gpus] == [
        (0, "i-0a1b2c3d4e5f60718-nd0", "AWS Inferentia2", 32768, "ai-asic", "aws")
    ]
    r = source.read(0)
    assert (r.util_pct, r.mem_used_mib, r.power_w, r.energy_mj) == (60.0, 2288.0, None, None)
    assert source.read(0) is None  # nothing new since: no repeated reading
    source.feed(LINES[2])
    assert source.read(0)[:2] == (45.0, 2288.0)
    source.feed(LINES[3])
    assert source.read(0)[:2] == (None, None)  # the runtime's error: unknown, not idle
    assert source.feed(LINES[4]) is False  # cut short
    assert source.read(0) is None
    source.feed(LINES[5])
    assert source.read(0)[:2] == (0.0, 0.0)
    assert source.kind == "neuron-monitor"


def test_trn2_logical_cores_map_to_their_device():
    hw = Hardware(
        {
            "neuron_device_type": "trainium2",
            "neuron_device_count": 2,
            "neuroncore_per_device_count": 8,
            "logical_neuroncore_config": 2,
            "neuron_device_memory_size": 103079215104,
            "error": "",
        }
    )
    # LNC=2: 8 physical cores -> 4 logical per device; logical cores 4 and 5 are device 1's.
    doc = {
        "neuron_runtime_data": [
            {
                "pid": 1,
                "error": "",
                "report": {
                    "neuroncore_counters": {
                        "period": 1.0,
                        "error": "",
                        "neuroncores_in_use": {
                            "4": {"neuroncore_utilization": 100.0},
                            "5": {"neuroncore_utilization": 60.0},
                            "x": {"neuroncore_utilization": 50.0},  # not an index
                            "6": {"neuroncore_utilization": "busy"},
                        },
                    }
                },
            }
        ]
    }
    out = parse_report(doc, hw)
    assert hw.model == "AWS Trainium2" and hw.memory_total_mib == 98304
    assert out[0].util_pct == 0.0
    assert out[1].util_pct == 40.0  # (100 + 60 + 0 + 0) / 4
    assert out[1].mem_used_mib is None  # no memory group reported


def test_power_from_sysfs_is_integrated_and_labelled_power(tmp_path):
    path = tmp_path / "neuron0" / "stats" / "power"
    path.mkdir(parents=True)
    (path / "utilization").write_text(VALID)
    source = NeuronSource(max_power_w=400.0, sysfs_root=tmp_path, wall=lambda: TS + 30.0)
    acct = EnergyAccountant(max_gap_s=25.0)
    out = []
    for t, line in ((0.0, LINES[1]), (5.0, LINES[2])):
        source.feed(line)
        r = source.read(0)
        assert r.power_w == pytest.approx(110.0)
        out.append(acct.update(0, t, r.energy_mj, r.power_w))
    assert out == [(None, None), (pytest.approx(550.0), POWER)]  # never "counter"


@pytest.mark.parametrize(
    "text, now, expected",
    [
        (VALID, TS + 30, 110.0),
        (VALID, TS + 181, None),  # three refreshes missed: stale
        (f"POWER_STATUS_NO_DATA,{TS},0,0,0", TS, None),
        (f"POWER_STATUS_INVALID,{TS},0,0,0", TS, None),
        (f"POWER_STATUS_VALID,{TS},20.00,35.00", TS, None),  # a field short
        (f"POWER_STATUS_VALID,{TS},20,35,250", TS, None),  # over 100 %
        ("garbage", TS, None),
    ],
)
def test_sysfs_power_line(text, now, expected):
    got = sysfs_power_w(text, 400.0, now)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_without_a_maximum_or_the_file_power_stays_unknown(tmp_path):
    source = NeuronSource(max_power_w=None, sysfs_root=tmp_path)
    source.feed(LINES[1])
    assert source.read(0).power_w is None
    source = NeuronSource(max_power_w=400.0, sysfs_root=tmp_path)  # no neuron0 directory
    source.feed(LINES[1])
    assert source.read(0).power_w is None


def test_a_report_without_devices_is_skipped():
    source = NeuronSource()
    assert (
        source.feed(
            '{"neuron_runtime_data": [], "neuron_hardware_info": '
            '{"error": "neuron driver not loaded"}}'
        )
        is False
    )
    assert source.feed("[1, 2]") is False
    assert source.gpus() == []
