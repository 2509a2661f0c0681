"""Figures a page never computes in its request when they are slow: the page shows the last ones
it has, labelled with their time, and queues one task that computes them for the next view.

Shared by the team home's cost snapshot (dashboards.headline.page_figures, refresh_team_home)
and its KPI figures (refresh_team_kpis). Each kept entry is a dict with the team's id (a page
reads only its own team's entries) and when it was computed; a page looks up, in one cache
round trip, the keys that would hold the current entry and then older ones, and says which it
found: "current", "stale" (shown with its time, "refreshing") or "none" ("being computed")."""

from __future__ import annotations

from django.core.cache import cache

from greenops import queueing

# A refresh is queued once per this many seconds at most (a burst of page views after an edit
# queues one task); the task clears its mark when it is done.
MARK_S = 600

CURRENT, STALE, NONE = "current", "stale", "none"


def pick(found: dict, keys: list[str], team_id: int) -> tuple[dict | None, str]:
    """The first of `keys` (the current entry's first, then older ones) that `found` (a
    cache.get_many answer) holds for this team, and its state."""
    for i, key in enumerate(keys):
        entry = found.get(key)
        if entry is not None and entry.get("team_id") == team_id:
            return entry, CURRENT if i == 0 else STALE
    return None, NONE


def request(task, mark: str, *args) -> bool:
    """Queue `task(*args)` once: unless the cache mark `mark` says it is already queued. In the
    embedded default (tasks in-process) it runs after the response (queueing). True when this
    call queued it."""
    if not cache.add(mark, 1, MARK_S):
        return False
    queueing.publish_after_response(task, *args)
    return True


def done(mark: str) -> None:
    """The task behind `mark` finished (or failed): the next page that needs it queues it."""
    cache.delete(mark)
