"""`greenops-agent enroll`: trade a single-use enrollment token for this host's token.

Gathers the GPUs (NVML, or --simulate) and host facts (CPU model, RAM; instance type and
region from flags, or from the cloud's instance metadata service when it answers within
METADATA_TIMEOUT_S), posts them to POST /api/v1/enroll, and writes server + token to the
agent's config file with mode 0600, which `run` then reads.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

from collectors import __version__
from collectors.config import DEFAULT_CONFIG_FILE, user_config_file
from collectors.probe import request_json

# AWS, Azure and GCP all serve instance metadata at this address; tests point --metadata-url at
# a local fake instead.
METADATA_URL = "http://169.254.169.254"
METADATA_TIMEOUT_S = 0.3  # off-cloud the address does not answer; do not make enroll wait


class EnrollError(RuntimeError):
    """A failure the user can fix; the CLI prints it as one line."""


def enroll_config_path() -> Path:
    """Root writes the system file the systemd unit uses; anyone else their own."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return DEFAULT_CONFIG_FILE
    return user_config_file()


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()[:255]
    except OSError:
        pass
    return (platform.processor() or platform.machine())[:255]


def ram_total_mib(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024  # the kernel reports kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return None


def _imds(base: str, path: str, token: str, timeout_s: float) -> str | None:
    req = urllib.request.Request(base + path, headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return resp.read(4096).decode("utf-8", "replace").strip() or None


def _get(url: str, headers: dict, timeout_s: float) -> bytes:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return resp.read(65536)


def _aws_facts(base: str, timeout_s: float) -> dict:
    req = urllib.request.Request(base + "/latest/api/token", method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        token = resp.read(4096).decode().strip()
    instance_type = _imds(base, "/latest/meta-data/instance-type", token, timeout_s)
    region = _imds(base, "/latest/meta-data/placement/region", token, timeout_s)
    return {"provider": "aws", "facts_source": "aws-imds", "instance_type": instance_type,
            "region": region}


def _gcp_facts(base: str, timeout_s: float) -> dict:
    headers = {"Metadata-Flavor": "Google"}
    path = "/computeMetadata/v1/instance/"
    # "projects/123/machineTypes/a2-highgpu-1g" and "projects/123/zones/us-central1-a"
    machine = _get(base + path + "machine-type", headers, timeout_s).decode().rsplit("/", 1)[-1]
    zone = _get(base + path + "zone", headers, timeout_s).decode().rsplit("/", 1)[-1]
    return {"provider": "gcp", "facts_source": "gcp-metadata", "instance_type": machine,
            "region": zone.rsplit("-", 1)[0] if zone.count("-") >= 2 else zone}


def _azure_facts(base: str, timeout_s: float) -> dict:
    doc = json.loads(_get(base + "/metadata/instance/compute?api-version=2021-02-01",
                          {"Metadata": "true"}, timeout_s))
    return {"provider": "azure", "facts_source": "azure-imds",
            "instance_type": doc.get("vmSize"), "region": doc.get("location")}


def cloud_facts(base: str | None, timeout_s: float = METADATA_TIMEOUT_S) -> dict:
    """Instance type and region from the cloud's metadata service (AWS IMDSv2, GCP, Azure), or
    {} when nothing answers quickly. Off-cloud the first attempt times out and no other is
    tried, so enroll waits at most about timeout_s."""
    if not base:
        return {}
    base = base.rstrip("/")
    for ask in (_aws_facts, _gcp_facts, _azure_facts):
        try:
            facts = ask(base, timeout_s)
        except urllib.error.HTTPError:
            continue  # something answered, but not this cloud's API: try the next
        except (OSError, urllib.error.URLError, ValueError, json.JSONDecodeError):
            return {}  # nothing answers (or garbage): not on a cloud we know
        return {k: (v[:64] if isinstance(v, str) else v) for k, v in facts.items() if v}
    return {}


def gather_facts(configured: dict, metadata_url: str | None) -> dict:
    """Configured values win; the metadata service fills only what was not configured."""
    facts: dict = {"cpu_model": cpu_model(), "ram_total_mib": ram_total_mib()}
    configured = {k: v for k, v in configured.items() if v}
    if not ({"instance_type", "region"} <= set(configured)):
        facts.update(cloud_facts(metadata_url))
    if configured:
        facts.update(configured)
        if "facts_source" not in facts:
            facts["facts_source"] = "config"
    return {k: v for k, v in facts.items() if v is not None}


def request_enrollment(server: str, token: str, gpus: list[dict], facts: dict,
                       hostname: str | None = None, timeout_s: float = 10.0) -> dict:
    if not server.startswith(("http://", "https://")):
        raise EnrollError(f"server URL must start with http:// or https://: {server!r}")
    body = {"token": token, "hostname": hostname or socket.gethostname(),
            "agent_version": __version__, "gpus": gpus, "facts": facts}
    url = server.rstrip("/") + "/api/v1/enroll"
    answer = request_json(url, body=body, timeout_s=timeout_s)
    if answer.status is None:
        raise EnrollError(f"cannot reach the GreenOps server at {server}: {answer.error}")
    if answer.status == 201 and answer.doc and isinstance(answer.doc.get("token"), str):
        return answer.doc
    if answer.status == 404:
        raise EnrollError(f"{server} has no /api/v1/enroll (HTTP 404): is this the GreenOps "
                          "server's URL?")
    if answer.doc is None:
        raise EnrollError(f"unexpected answer from {server}: {answer.error}")
    if answer.status == 401:
        raise EnrollError(f"enrollment refused: {answer.server_message()}")
    if answer.status >= 500:
        raise EnrollError(f"the server failed (HTTP {answer.status}); try again in a minute")
    field = answer.doc.get("field")
    where = f" ({field})" if field else ""
    raise EnrollError(f"enrollment rejected{where}: {answer.server_message()}")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def _is_dir(path: Path) -> bool:
    try:  # Path.is_dir raises PermissionError under a directory we may not search
        return path.is_dir()
    except OSError:
        return False


def _write_error(path: Path, exc: OSError) -> EnrollError:
    if isinstance(exc, (NotADirectoryError, FileExistsError)):
        reason = "a file is in the way of its directory"
    elif isinstance(exc, IsADirectoryError) or _is_dir(path):
        reason = "it is a directory"
    else:
        reason = exc.strerror or str(exc)
    hint = " (run as root, or pass --config ~/.config/greenops/agent.toml)" \
        if isinstance(exc, PermissionError) else ""
    return EnrollError(f"cannot write {path}: {reason}{hint}")


def _read_existing(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except IsADirectoryError as exc:
        raise _write_error(path, exc) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise EnrollError(f"cannot read the existing config {path}: {exc}") from None


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _discard(tmp: Path) -> None:
    # Cleanup must never hide the real error: when the directory could not be made, unlinking
    # in it raises NotADirectoryError, which missing_ok does not cover.
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass


def check_writable(path: Path) -> None:
    """Fail now if the config cannot be written later, because enrolling spends the single-use
    token: create the directory, create and remove a file next to the config, and read the
    existing config (it is merged into)."""
    if _is_dir(path):
        raise _write_error(path, IsADirectoryError(21, "Is a directory"))
    tmp = _tmp_path(path)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    except OSError as exc:
        raise _write_error(path, exc) from None
    finally:
        _discard(tmp)
    _read_existing(path)


def existing_scrape(path: Path) -> list[dict]:
    """The [[scrape]] tables the config at `path` has now (none if there is no file)."""
    scrape = _read_existing(path).get("scrape", [])
    return [dict(t) for t in scrape] if isinstance(scrape, list) else []


def with_dcgm_target(scrape: list[dict], url: str) -> list[dict]:
    """`scrape` with its dcgm target (a host has one exporter) set to `url`; the inference
    server targets stay as they were."""
    return [t for t in scrape if t.get("kind") != "dcgm"] + [{"url": url, "kind": "dcgm"}]


def _toml_table(name: str, table: dict) -> str:
    lines = [f"\n[[{name}]]\n"]
    for k, v in table.items():
        if isinstance(v, dict):
            inner = ", ".join(f"{json.dumps(str(ik))} = {_toml_value(iv)}"
                              for ik, iv in v.items())
            lines.append(f"{k} = {{{inner}}}\n")
        else:
            lines.append(f"{k} = {_toml_value(v)}\n")
    return "".join(lines)


def write_config(path: Path, updates: dict) -> None:
    """Merge `updates` into the TOML file at `path`, atomically, readable only by its owner.
    Arrays of tables ([[scrape]]) are written after the plain keys, as TOML requires."""
    merged = {**_read_existing(path), **updates}
    plain = {k: v for k, v in merged.items() if not isinstance(v, list)}
    tables = {k: v for k, v in merged.items() if isinstance(v, list)}
    text = (f"# Written by greenops-agent enroll on {time.strftime('%Y-%m-%d %H:%M:%S')}.\n"
            "# Holds this host's token: keep it readable by its owner only (mode 0600).\n"
            + "".join(f"{k} = {_toml_value(v)}\n" for k, v in plain.items())
            + "".join(_toml_table(k, t) for k, rows in tables.items() for t in rows))
    tmp = _tmp_path(path)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)  # O_CREAT's mode is filtered by the umask; make sure
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise _write_error(path, exc) from None
