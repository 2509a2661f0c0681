"""The agent as a wheel, built on demand from the repository's collectors/ directory.

A GPU host installs the agent from the GreenOps server it reports to, so installation needs no
package index for the agent itself and always matches the server's version. A wheel (not an
sdist) because installing it needs no build backend: pip unpacks it, offline. Its only
dependency, nvidia-ml-py, comes from the host's usual index or is preinstalled.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tomllib
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings

COLLECTORS_DIR = Path(settings.BASE_DIR) / "collectors"
# Fixed timestamp: the same sources give byte-identical wheels (cache-friendly, verifiable).
_ZIP_DATE = (2020, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class AgentWheel:
    filename: str
    version: str
    content: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


def _project() -> dict:
    with (COLLECTORS_DIR / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]


def _sources() -> list[Path]:
    return sorted(p for p in COLLECTORS_DIR.glob("*.py") if p.is_file())


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _metadata(project: dict) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '>=3.11')}",
    ]
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {dep}; extra == "{extra}"' for dep in deps]
    return "\n".join(lines) + "\n"


def _build(key: tuple) -> AgentWheel:
    project = _project()
    dist = project["name"].replace("-", "_")
    version = project["version"]
    info = f"{dist}-{version}.dist-info"
    files: list[tuple[str, bytes]] = [
        (f"collectors/{p.name}", p.read_bytes()) for p in _sources()
    ]
    scripts = project.get("scripts", {})
    entry_points = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
    files += [
        (f"{info}/METADATA", _metadata(project).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: greenops-server\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{info}/entry_points.txt", entry_points.encode()),
        (f"{info}/top_level.txt", b"collectors\n"),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files)
    record += f"{info}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [*files, (f"{info}/RECORD", record.encode())]:
            zi = zipfile.ZipInfo(name, _ZIP_DATE)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return AgentWheel(f"{dist}-{version}-py3-none-any.whl", version, buf.getvalue())


@lru_cache(maxsize=2)
def _cached(key: tuple) -> AgentWheel:
    return _build(key)


def agent_wheel() -> AgentWheel:
    """The current wheel; rebuilt only when a source file changed."""
    paths = [*_sources(), COLLECTORS_DIR / "pyproject.toml"]
    return _cached(tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in paths))


SYSTEMD_UNIT = """\
# /etc/systemd/system/greenops-agent.service
# Install:  sudo cp greenops-agent.service /etc/systemd/system/ &&
#           sudo systemctl daemon-reload && sudo systemctl enable --now greenops-agent
[Unit]
Description=GreenOps GPU agent
After=network-online.target nvidia-persistenced.service
Wants=network-online.target

[Service]
# `greenops-agent enroll` (run as root) wrote server and token to /etc/greenops/agent.toml
# (mode 0600), which `run` reads.
ExecStart={prefix}/bin/greenops-agent run
StateDirectory=greenops-agent
Restart=always
RestartSec=5
TimeoutStopSec=15

[Install]
WantedBy=multi-user.target
"""

AGENT_PREFIX = "/opt/greenops-agent"


def systemd_unit() -> str:
    return SYSTEMD_UNIT.format(prefix=AGENT_PREFIX)


def install_command(server: str, wheel_url: str, enroll_token: str) -> str:
    """One line for a root shell on the GPU host: venv, agent from this server, enroll."""
    p = AGENT_PREFIX
    return (f'python3 -m venv {p} && {p}/bin/pip install -q "{wheel_url}" && '
            f"{p}/bin/greenops-agent enroll --server {server} --token {enroll_token}")
