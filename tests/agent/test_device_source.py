"""Choosing what reads the devices (issue 33): device_source in the config, flag or
environment, and a clear one-line refusal when its tool is not there."""

from __future__ import annotations

import pytest

from collectors.cli import main
from collectors.config import ConfigError, load_config
from collectors.devices import DeviceUnavailable, open_device_source


def test_device_source_and_max_power_come_from_flags_or_environment(tmp_path):
    config = load_config(
        {"device_source": "neuron"},
        environ={"GREENOPS_DEVICE_MAX_POWER_W": "400"},
        config_file=None,
    )
    assert (config.device_source, config.device_max_power_w) == ("neuron", 400.0)
    assert load_config({}, environ={}).device_source == "nvml"
    with pytest.raises(ConfigError, match="device_source"):
        load_config({"device_source": "tpu"}, environ={})
    with pytest.raises(ConfigError, match="device_max_power_w must be a float"):
        load_config({}, environ={"GREENOPS_DEVICE_MAX_POWER_W": "lots"})


def test_a_missing_tool_is_a_one_line_refusal(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no amd-smi, neuron-monitor or tegrastats
    for name in ("amd", "neuron", "jetson"):
        with pytest.raises(DeviceUnavailable, match=f"device_source = '{name}'"):
            open_device_source(name)
    with pytest.raises(DeviceUnavailable, match="must be one of"):
        open_device_source("tpu")
    code = main(
        [
            "run",
            "--server",
            "http://127.0.0.1:9",
            "--token",
            "gho_x",
            "--device-source",
            "amd",
            "--spool",
            str(tmp_path / "spool.db"),
            "--config",
            str(_empty_config(tmp_path)),
        ]
    )
    assert code == 2
    assert "device_source = 'amd': cannot run amd-smi" in capsys.readouterr().err


def _empty_config(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text("")
    return path
