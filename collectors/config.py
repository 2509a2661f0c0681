"""Agent settings from flags, environment variables and a TOML file, in that precedence.

Every setting has one name used three ways: the TOML key (``batch_seconds``), the
environment variable (``GREENOPS_BATCH_SECONDS``) and the flag (``--batch-seconds``).
Prefer the file or the environment for the token: flags are visible in ``ps``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.spool import DEFAULT_MAX_BATCHES, DEFAULT_MAX_BYTES, default_spool_path

DEFAULT_CONFIG_FILE = Path("/etc/greenops/agent.toml")
ENV_PREFIX = "GREENOPS_"


def user_config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "greenops" / "agent.toml"


def default_config_file() -> Path:
    """Where `enroll` writes and `run` reads: /etc/greenops/agent.toml for root; for anyone
    else their own ~/.config/greenops/agent.toml if it exists, else the system file."""
    if hasattr(os, "geteuid") and os.geteuid() != 0 and user_config_file().is_file():
        return user_config_file()
    return DEFAULT_CONFIG_FILE


class ConfigError(ValueError):
    """A setting is missing or malformed; the CLI prints it as one line and exits 2."""


@dataclass(frozen=True)
class AgentConfig:
    server: str | None = None
    token: str | None = None
    simulate: int | None = None  # N simulated GPUs instead of NVML
    seed: int = 0  # seed of the simulated curves
    interval: float = 1.0  # seconds between samples
    batch_seconds: float = 10.0  # seconds of samples per batch
    flush_timeout: float = 5.0  # seconds to try to empty the spool at shutdown
    request_timeout: float = 10.0  # seconds per HTTP request
    spool: str | None = None  # path of the spool database; None: the default path
    spool_max_mb: float = DEFAULT_MAX_BYTES / 1024**2
    spool_max_batches: int = DEFAULT_MAX_BATCHES
    backoff_base: float = 1.0
    backoff_cap: float = 60.0  # a server back after an outage is found within a minute
    device_source: str = "nvml"  # "nvml", "amd", "neuron" or "jetson" (collectors/devices.py)
    device_max_power_w: float | None = None  # Neuron: sysfs gives power as % of this maximum
    nvml_lib: str | None = None  # dotted module to use instead of pynvml (tests, benchmarks)
    host_energy: str = "codecarbon"  # CPU/RAM energy: "codecarbon" (if installed) or "off"
    host_energy_interval: float = 15.0  # seconds between CPU/RAM readings
    host_samples: str = "on"  # host CPU/network/disk and GPU processes: "on" or "off"
    host_sample_interval: float = 15.0  # seconds between host activity readings
    # Kubernetes pods holding each GPU, from the kubelet's PodResources socket: "auto" (when
    # the socket is there or the agent runs in a pod), "off", or the socket's path.
    pod_resources: str = "auto"
    scrape_interval: float = 15.0  # seconds between scrapes of the inference servers
    scrape: tuple = ()  # [[scrape]] tables of the TOML file: collectors.scrape.Target

    @property
    def spool_path(self) -> Path:
        return Path(self.spool).expanduser() if self.spool else default_spool_path()

    def require_server(self) -> None:
        if not self.server:
            raise ConfigError("no server URL: pass --server URL or set GREENOPS_SERVER")
        if not self.server.startswith(("http://", "https://")):
            raise ConfigError(f"server URL must start with http:// or https://: {self.server!r}")
        if not self.token:
            raise ConfigError("no token: pass --token TOKEN or set GREENOPS_TOKEN")


_FIELDS = {f.name: f for f in dataclasses.fields(AgentConfig)}


def _coerce(name: str, value: Any, origin: str) -> Any:
    if name == "scrape":
        from collectors.scrape import TargetError, parse_target

        if not isinstance(value, list):  # also GREENOPS_SCRAPE: targets need the file
            raise ConfigError(f"{origin}: scrape targets are [[scrape]] tables of the config file")
        try:
            targets = tuple(parse_target(doc, f"scrape[{i}]") for i, doc in enumerate(value))
        except TargetError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        if sum(t.kind == "dcgm" for t in targets) > 1:
            raise ConfigError(f"{origin}: at most one kind = \"dcgm\" target (a host has one "
                              "dcgm-exporter)")
        return targets
    default = _FIELDS[name].default
    kind = type(default) if default is not None else (
        int if name == "simulate" else float if name == "device_max_power_w" else str)
    try:
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{origin}: {name} must be a {kind.__name__}, got {value!r}") from None


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(unknown)}")
    return {k: _coerce(k, v, str(path)) for k, v in data.items()}


def load_config(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> AgentConfig:
    """Merge defaults < config file < environment < flags (flags whose value is None are unset).

    ``config_file`` (from ``--config`` or ``GREENOPS_CONFIG``) must exist when given; the
    default ``/etc/greenops/agent.toml`` is read only if it is there.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    path_text = config_file or environ.get(ENV_PREFIX + "CONFIG")
    if path_text:
        values.update(read_config_file(Path(path_text).expanduser()))
    elif default_config_file().is_file():
        values.update(read_config_file(default_config_file()))
    for name in _FIELDS:
        env_value = environ.get(ENV_PREFIX + name.upper())
        if env_value not in (None, ""):
            values[name] = _coerce(name, env_value, ENV_PREFIX + name.upper())
    for name, value in flags.items():
        if name in _FIELDS and value is not None:
            values[name] = _coerce(name, value, "--" + name.replace("_", "-"))
    config = AgentConfig(**values)
    if config.interval <= 0 or config.batch_seconds <= 0:
        raise ConfigError("interval and batch_seconds must be positive")
    if config.host_energy not in ("codecarbon", "off"):
        raise ConfigError("host_energy must be \"codecarbon\" or \"off\"")
    if config.device_source not in ("nvml", "amd", "neuron", "jetson"):
        raise ConfigError("device_source must be \"nvml\", \"amd\", \"neuron\" or \"jetson\"")
    if config.host_samples not in ("on", "off"):
        raise ConfigError("host_samples must be \"on\" or \"off\"")
    if (config.host_energy_interval <= 0 or config.scrape_interval <= 0
            or config.host_sample_interval <= 0):
        raise ConfigError("host_energy_interval, host_sample_interval and scrape_interval "
                          "must be positive")
    if config.simulate is not None and config.simulate < 1:
        raise ConfigError("simulate must be at least 1 GPU")
    return config
