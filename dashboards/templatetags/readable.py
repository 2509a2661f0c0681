"""Numbers as people read them: thousands separators, and small figures keep their
significant digits (a codecarbon run of 4.6e-05 kWh is not "0.0000")."""

from __future__ import annotations

import datetime as dt
import html
import math
import re
from urllib.parse import urlsplit

import orjson
from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from greenops.windows import span_words as _span_words

register = template.Library()


@register.filter
def num(value: float | int | None, digits: int = 2) -> str:
    """`digits` decimals with thousands separators; three significant digits instead when the
    decimals would show fewer than two (0.000046 with 2 decimals). None is an en dash."""
    if value is None or value == "":
        return "–"
    try:
        v = float(value)
    except (TypeError, ValueError):  # not a number: show it as it is, never a 500
        return str(value)
    if not math.isfinite(v):
        return "–"
    digits = int(digits)
    if digits > 0 and v != 0 and abs(v) < 10 ** (1 - digits):
        # 3 significant digits: 0.0000461 -> "0.0000461", 0.0123 -> "0.0123"
        decimals = max(digits, 2 - math.floor(math.log10(abs(v))))
        return f"{v:,.{decimals}f}"
    return f"{v:,.{digits}f}"


@register.filter
def ago(value, now=None) -> str:
    """A short age for narrow tables: "<1 min ago", "7 min ago", "5 h ago", "3 d ago" (hours
    up to two days, so "30 h ago" rather than "1 d ago"); "never" for no time."""
    if value is None:
        return "never"
    s = ((now or timezone.now()) - value).total_seconds()
    if s < 60:
        return "<1 min ago"
    if s < 3600:
        return f"{int(s // 60)} min ago"
    if s < 2 * 86400:
        return f"{int(s // 3600)} h ago"
    return f"{int(s // 86400)} d ago"


@register.filter
def utc(value) -> str:
    """A time as "2026-12-01 14:05:09" in UTC (for labels that say UTC): Django's |date with
    its format string cost 70 us a call, a tenth of the team home's host table."""
    if value is None:
        return ""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@register.filter
def signed_pct(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:+,.1f} %"


_URL = re.compile(r"https?://[^\s;,()<>\"']+")


def link_name(url: str) -> str:
    """What a reader calls a source URL: its file or last path part, and the site it is on
    ("hyperscalers.json on raw.githubusercontent.com")."""
    parts = urlsplit(url)
    last = parts.path.rstrip("/").rsplit("/", 1)[-1]
    return f"{last} on {parts.netloc}" if last else parts.netloc


@register.filter(needs_autoescape=True)
def sources(value: str | None, autoescape: bool = True) -> str:
    """A source string with each URL in it as a named link (the full URL in its href and
    title); the rest of the text escaped as usual. Empty stays empty (callers |default)."""
    if not value:
        return value or ""
    esc = conditional_escape if autoescape else str
    out, pos = [], 0
    for m in _URL.finditer(value):
        url = m.group(0).rstrip(".")
        out.append(esc(value[pos : m.start()]))
        out.append(
            format_html('<a href="{}" title="{}" rel="noopener">{}</a>', url, url, link_name(url))
        )
        pos = m.start() + len(url)
    out.append(esc(value[pos:]))
    return mark_safe("".join(str(p) for p in out))  # noqa: S308 -- every part escaped above


@register.filter
def figure_script(value, element_id: str) -> str:
    """Django's json_script for the chart specs, serialised by orjson and escaped with
    str.replace: a 1,000-GPU page's specs are ~0.3 MB, where json_script's str.translate took
    ~35 ms a page. Same escapes (<, >, & as \\u003C, \\u003E, \\u0026), same <script> element."""
    text = (
        orjson.dumps(value)
        .decode()
        .replace("<", "\\u003C")
        .replace(">", "\\u003E")
        .replace("&", "\\u0026")
    )
    return format_html(
        '<script id="{}" type="application/json">{}</script>', element_id, mark_safe(text)
    )


@register.simple_tag
def host_rows(team_slug: str, hosts: list[dict]) -> str:
    """The team home's host table body from fleet.team_hosts rows, in Python: the same rows as
    a template loop took 1.5-2 ms for 20 hosts (a twentieth of a last-hour view), this a
    fifth of that. Every text from the database is escaped (html.escape, as Django's |escape);
    the host links differ only in the id, so one reverse() with a stand-in id, not one per
    row (35 us each)."""
    stand_in = "987654321"
    before, _, after = reverse("host-detail", args=[team_slug, stand_in]).rpartition(stand_in)
    before, after = html.escape(before), html.escape(after)
    now = timezone.now()
    rows = []
    for h in hosts:
        status = "offline" if h["offline"] else "online"
        region = (
            f'<span class="wide-only"> · {html.escape(h["region"])}</span>' if h["region"] else ""
        )
        seen = h["last_seen"]
        title = f' title="{utc(seen)} UTC"' if seen else ""
        rows.append(
            f'<tr><td><a href="{before}{int(h["id"])}{after}">{html.escape(h["name"])}</a></td>'
            f'<td><span class="status {status}">{status}</span></td>'
            f"<td>{len(h['gpu_ids'])}</td>"
            f"<td>{html.escape(h['instance_type'] or '–')}{region}</td>"
            f'<td class="wide-only">{html.escape(h["agent_version"] or "–")}</td>'
            f"<td{title}>{ago(seen, now)}</td></tr>"
        )
    return mark_safe("\n".join(rows))  # every database text above escaped


@register.filter
def span_words(seconds: float | int | None) -> str:
    """A window's length as the window prints it: 2592000 -> "30 days", 3600 -> "1 hour"."""
    if seconds in (None, ""):
        return ""
    return _span_words(dt.timedelta(seconds=float(seconds)))


# The team menu's sections (templates/_team_nav.html): which one a page belongs to, by its URL
# name, so the menu marks where the reader is. The daily views come first; the rest sit under
# the team's Settings.
_SECTION_PREFIXES = [
    ("team-dashboard", "home"),
    ("host-detail", "home"),
    ("host-edit", "hosts"),
    ("kpi-", "kpis"),
    ("costs-", "costs"),
    ("price-", "prices"),
    ("carbon-sites", "sites"),
    ("site-", "sites"),
    ("carbon-", "carbon"),
    ("workload-", "workloads"),
    ("alert-", "alerts"),
    ("report", "reports"),
    ("advisor-", "advisor"),
    ("benchmark-", "benchmarks"),
    ("host-", "hosts"),
    ("team-members", "members"),
    ("member-", "members"),
    ("invitation-", "members"),
    ("team-permissions", "permissions"),
    ("api-token", "tokens"),
    ("team-audit", "audit"),
    ("team-", "settings"),
]
SETTINGS_SECTIONS = {
    "hosts",
    "sites",
    "prices",
    "members",
    "permissions",
    "tokens",
    "audit",
    "settings",
}


@register.filter
def section_of(url_name: str | None) -> str:
    """The team-menu section of a page's URL name ("kpi-job" -> "kpis"); "" when none."""
    for prefix, section in _SECTION_PREFIXES:
        if url_name and url_name.startswith(prefix):
            return section
    return ""


@register.filter
def in_settings(section: str) -> bool:
    return section in SETTINGS_SECTIONS


_DATE = re.compile(r"\b(20\d\d-\d\d-\d\d)\b")


def short_source(value: str | None) -> str:
    """A source's short name for a table cell: the words before its first URL (or the URL's
    file), and the first date in it: "snapshot aws_prices_2026-11-09.json" stays, "hourly price
    from https://raw.githubusercontent.com/.../hyperscalers.json as of 2026-11-09" becomes
    "hourly price from hyperscalers.json, 2026-11-09"."""
    if not value:
        return ""
    text = " ".join(str(value).split())
    m = _URL.search(text)
    head = text[: m.start()].strip(" ·;,(:") if m else text
    if m:
        name = link_name(m.group(0).rstrip(".")).split(" on ")[0]
        head = f"{head} {name}".strip() if len(head) <= 30 else head
    if len(head) > 48:
        cut = head.rfind(" ", 0, 46)
        head = head[: cut if cut > 20 else 46].rstrip(" ·;,(:") + "…"
    date = _DATE.search(text)
    if date and date.group(1) not in head:
        head = f"{head}, {date.group(1)}"
    return head


@register.filter(needs_autoescape=True)
def disclose(value: str | None, label: str = "", autoescape: bool = True) -> str:
    """Reasoning or a source folded behind a short named summary (<details>): a table cell
    shows "hyperscalers.json, 2026-11-09 ▸", the full text with its links opens on a click.
    A short text is shown as it is; empty stays empty (callers |default)."""
    if not value:
        return value or ""
    text = str(value)
    if len(text) <= 40 and not _URL.search(text):
        return conditional_escape(text) if autoescape else text
    return format_html('<details class="why"><summary>{}</summary><div>{}</div></details>',
                       label or short_source(text), sources(text, autoescape))


@register.filter
def measured_jobs(jobs: list[dict]) -> list[dict]:
    """Training jobs with measured GPU time, or not accounted yet (shown in the table)."""
    return [j for j in jobs if j.get("gpu_hours") is None or j.get("cost_usd") is not None
            or j["gpu_hours"] > 0]


@register.filter
def unmeasured_jobs(jobs: list[dict]) -> list[dict]:
    """Training jobs accounted with no telemetry at all: unknown, with the reason, not 0.0."""
    return [j for j in jobs if j.get("gpu_hours") is not None and j.get("cost_usd") is None
            and j["gpu_hours"] <= 0]


# Form fields as the form's own labels call them, for error summaries ("Not saved — Fire
# level: must be a number"): a person never reads a code name such as fire_level.
FIELD_WORDS = {
    "name": "Name", "kind": "Kind", "kpi": "KPI", "scope": "Scope", "host": "Host",
    "gpu": "GPU", "workload": "Workload", "window": "Window", "direction": "Direction",
    "fire_level": "Fire level", "clear_level": "Clear level",
    "baseline_days": "Baseline days", "min_requests": "Minimum inferences in a window",
    "forecast_min_days": "Complete days before a forecast",
    "stopped_minutes": "Minutes without samples", "for_minutes": "Pending minutes",
    "keep_firing_minutes": "Keep-firing minutes", "no_data": "When there is no data",
    "nodata_grace_minutes": "No-data minutes", "channels": "Channels",
    "repeat_minutes": "Repeat minutes", "mute_weekdays": "Mute days",
    "mute_start_hour": "Mute from hour", "mute_end_hour": "Mute to hour",
    "target": "Target", "url": "URL", "label": "Label", "a": "Variant A",
    "b": "Variant B", "a_start": "A from", "a_end": "A to", "b_start": "B from",
    "b_end": "B to", "note": "Note", "match_process": "Process name",
    "match_namespace": "Kubernetes namespace",
    "match_pod_prefix": "Pod name prefix", "pue": "PUE", "discount_pct": "Discount (%)",
    "valid_from": "Valid from", "valid_to": "Valid to", "usd_per_hour": "Price per hour (USD)",
    "instance_type": "Instance type", "purchase_option": "Purchase option",
    "time_zone": "Time zone", "email": "Email", "role": "Role", "month": "Month",
}
_UNIT_WORDS = {"pct": "(%)", "usd": "(USD)", "kwh": "(kWh)", "kg": "(kg)", "g": "(g)",
               "min": "(minutes)", "s": "(seconds)", "w": "(W)", "j": "(J)"}


@register.filter
def field_label(field: str | None) -> str:
    """A form field's name in the user's words: "fire_level" -> "Fire level",
    "idle_threshold_pct" -> "Idle threshold (%)"; a dotted path keeps its last part."""
    if not field:
        return ""
    key = str(field).rsplit(".", 1)[-1].split("[", 1)[0]
    if key in FIELD_WORDS:
        return FIELD_WORDS[key]
    words = key.split("_")
    unit = _UNIT_WORDS.get(words[-1]) if len(words) > 1 else None
    text = " ".join(words[:-1] if unit else words).capitalize()
    return f"{text} {unit}" if unit else text
