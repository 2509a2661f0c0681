"""What the host list shows per host: online or not, agent, GPUs, spool lag, token state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min
from django.utils import timezone

from greenops.teams.models import Team
from greenops.telemetry.models import ONLINE_WINDOW_S, Host, IngestBatch


@dataclass(frozen=True)
class HostStatus:
    host: Host
    online: bool
    gpu_names: list[str]
    token_state: str  # "active", "revoked", "removed"
    # Batches the API accepted (202) that no worker has stored yet, and how long the oldest has
    # waited: the data lag. A lag that grows means workers are down or behind, not the agent.
    pending_batches: int = 0
    data_lag_s: float | None = None
    silent_s: float | None = None  # since the last batch; None when it never sent one

    @property
    def stopped_sending(self) -> bool:
        """An active host whose agent sent before but has been silent past the online window."""
        return self.token_state == "active" and not self.online and self.silent_s is not None

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
            "stopped_sending": self.stopped_sending, "silent_s": self.silent_s,
            "pending_batches": self.pending_batches, "data_lag_s": self.data_lag_s,
        }


def host_statuses(team: Team, *, removed: bool = False,
                  now: datetime | None = None) -> list[HostStatus]:
    """The team's current hosts (or, with removed=True, the removed ones), two queries."""
    now = now or timezone.now()
    hosts = list(team.hosts.filter(removed_at__isnull=not removed).prefetch_related("gpus"))
    pending = pending_by_host([h.id for h in hosts])
    return [_status(h, now, pending.get(h.id)) for h in hosts]


def host_status(host: Host, now: datetime | None = None) -> HostStatus:
    """One host's status (the agent's `status` command asks for its own through whoami)."""
    return _status(host, now or timezone.now(), pending_by_host([host.id]).get(host.id))


def pending_by_host(host_ids: list[int]) -> dict[int, tuple[int, datetime]]:
    """host id -> (batches accepted but not stored, when the oldest of them was accepted);
    one query on the partial index of pending batches."""
    rows = (IngestBatch.objects.filter(host_id__in=host_ids, status=IngestBatch.Status.PENDING)
            .values("host_id").annotate(n=Count("id"), oldest=Min("received_at")))
    return {r["host_id"]: (r["n"], r["oldest"]) for r in rows}


def _status(h: Host, now: datetime, pending: tuple[int, datetime] | None) -> HostStatus:
    state = "removed" if h.removed_at else "revoked" if h.revoked_at else "active"
    n, oldest = pending or (0, None)
    return HostStatus(
        host=h, online=state == "active" and h.is_online(now, ONLINE_WINDOW_S),
        gpu_names=[g.name or f"GPU {g.index}" for g in h.gpus.all()], token_state=state,
        pending_batches=n,
        data_lag_s=None if oldest is None else max(0.0, (now - oldest).total_seconds()),
        silent_s=None if h.last_seen is None else max(0.0, (now - h.last_seen).total_seconds()),
    )
