"""What the host list shows per host: online or not, agent, GPUs, spool lag, token state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from greenops.teams.models import Team
from greenops.telemetry.models import Host

ONLINE_WINDOW_S = 120  # a host that sent nothing for 2 minutes (12 batches) is offline


@dataclass(frozen=True)
class HostStatus:
    host: Host
    online: bool
    gpu_names: list[str]
    token_state: str  # "active", "revoked", "removed"

    @property
    def spool_lag_s(self) -> float | None:
        """Age of the oldest batch still waiting on the host, as of its last report."""
        return self.host.spool_oldest_age_s

    def as_dict(self) -> dict:
        h = self.host
        return {
            "id": h.id, "name": h.name, "hostname": h.hostname, "online": self.online,
            "last_seen": h.last_seen.isoformat() if h.last_seen else None,
            "agent_version": h.agent_version, "gpus": self.gpu_names,
            "spool_depth": h.spool_depth, "spool_oldest_age_s": h.spool_oldest_age_s,
            "spool_reported_at": h.spool_reported_at.isoformat() if h.spool_reported_at else None,
            "token_state": self.token_state, "instance_type": h.instance_type,
            "region": h.region, "cpu_model": h.cpu_model, "ram_total_mib": h.ram_total_mib,
            "facts_source": h.facts_source,
        }


def host_statuses(team: Team, *, removed: bool = False,
                  now: datetime | None = None) -> list[HostStatus]:
    """The team's current hosts (or, with removed=True, the removed ones), two queries."""
    now = now or timezone.now()
    hosts = team.hosts.filter(removed_at__isnull=not removed).prefetch_related("gpus")
    out = []
    for h in hosts:
        state = "removed" if h.removed_at else "revoked" if h.revoked_at else "active"
        out.append(HostStatus(
            host=h, online=state == "active" and h.is_online(now, ONLINE_WINDOW_S),
            gpu_names=[g.name or f"GPU {g.index}" for g in h.gpus.all()], token_state=state,
        ))
    return out
