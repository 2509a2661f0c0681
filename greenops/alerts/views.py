"""Pages: rules (list, create, edit, delete, silence, a rule's page) and channels. Thin: the
permission check, one domain call, render."""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from greenops.alerts import channels, evaluate, kpi_values, notify, rules, tasks
from greenops.alerts.models import (
    Channel,
    ChannelKind,
    Digest,
    Direction,
    EmailAddress,
    NoDataPolicy,
    Notification,
    Rule,
    RuleKind,
)
from greenops.alerts.page import rule_chart
from greenops.errors import FieldError
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.telemetry.models import Gpu

log = logging.getLogger(__name__)
WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


@team_permission("team.view")
def rule_list(request: HttpRequest, team: Team) -> HttpResponse:
    return render(request, "alerts/list.html", {
        "team": team, "rules": Rule.objects.filter(team=team).for_page(),
        "channels": Channel.objects.filter(team=team),
        "notifications": Notification.objects.filter(channel__team=team)
        .select_related("channel", "rule")[:20],
        "can_manage": "alerts.manage" in request.team_actions,
        "kpis": kpi_values.KPIS, "now": timezone.now(),
    })


def _scope_options(team: Team) -> list[tuple[str, str]]:
    out = [("", f"Whole team ({team.name})")]
    out += [(f"host={h.name}", f"Host {h.name}") for h in team.hosts.filter(removed_at=None)]
    out += [(f"gpu={g.host.name}:{g.index}", f"GPU {g.index} of {g.host.name}")
            for g in Gpu.objects.filter(host__team=team, host__removed_at=None)
            .select_related("host")]
    out += [(f"workload={w.slug}", f"Workload {w.name}") for w in team.workloads.all()]
    return out


def _form_data(request: HttpRequest) -> dict:
    data = {k: request.POST.get(k, "") for k in request.POST if k not in
            ("csrfmiddlewaretoken", "channels", "mute_weekdays", "scope")}
    scope = request.POST.get("scope", "")
    if "=" in scope:
        key, _, value = scope.partition("=")
        data[key] = value
    data["channels"] = request.POST.getlist("channels")
    data["mute_weekdays"] = request.POST.getlist("mute_weekdays")
    for key in ("include_simulated", "budget_forecast", "enabled"):
        data[key] = key in request.POST
    return data


def _form(request: HttpRequest, team: Team, rule: Rule | None, data: dict,
          error: FieldError | None = None, status: int = 200) -> HttpResponse:
    return render(request, "alerts/form.html", {
        "team": team, "rule": rule, "d": data, "error": error,
        "scopes": _scope_options(team), "kinds": RuleKind.choices, "kpis": kpi_values.KPIS,
        "windows": kpi_values.WINDOWS, "directions": Direction.choices,
        "no_data_choices": NoDataPolicy.choices, "weekdays": list(enumerate(WEEKDAYS)),
        "channels": Channel.objects.filter(team=team),
        "selected_channels": {str(c) for c in data.get("channels", [])},
        "selected_days": {str(d) for d in data.get("mute_weekdays", [])},
    }, status=status)


def _initial(rule: Rule | None) -> dict:
    if rule is None:
        d = dict(rules.DEFAULTS)
        d.update(kind=RuleKind.THRESHOLD, kpi="gpu_util_pct", scope="")
        return d
    d = rules.as_dict(rule)
    d["scope"] = next((f"{k}={d[k]}" for k in ("host", "gpu", "workload") if d[k]), "")
    d["channels"] = [str(c.id) for c in rule.channels.all()]
    d["mute_weekdays"] = [str(x) for x in d["mute_weekdays"]]
    return d


def _save(request: HttpRequest, team: Team, rule: Rule | None) -> HttpResponse:
    data = _form_data(request)
    try:
        rule = rules.save(team, data, rule, request.user)
    except FieldError as exc:
        data["scope"] = request.POST.get("scope", "")
        return _form(request, team, rule, data, exc, status=400)
    messages.success(request, f"Saved “{rule.name}”. It is evaluated every minute.")
    return redirect("alert-rule", team.slug, rule.id)


@team_permission("alerts.manage")
def rule_new(request: HttpRequest, team: Team) -> HttpResponse:
    if request.method == "POST":
        return _save(request, team, None)
    return _form(request, team, None, _initial(None))


@team_permission("alerts.manage")
def rule_edit(request: HttpRequest, team: Team, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(Rule.objects.for_page(), team=team, id=rule_id)
    if request.method == "POST":
        return _save(request, team, rule)
    return _form(request, team, rule, _initial(rule))


@team_permission("team.view")
def rule_detail(request: HttpRequest, team: Team, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(Rule.objects.for_page(), team=team, id=rule_id)
    return render(request, "alerts/rule.html", {
        "team": team, "rule": rule, "chart": rule_chart(rule),
        "kpi": kpi_values.KPIS.get(rule.kpi),
        "window_label": kpi_values.WINDOWS.get(rule.window, ("",))[0],
        "events": rule.events.all()[:50],
        "notifications": rule.notifications.select_related("channel")[:30],
        "can_manage": "alerts.manage" in request.team_actions,
        "muted": rule.muted_reason(timezone.now(), kpi_values.team_tz(team)),
    })


@require_POST
@team_permission("alerts.manage")
def rule_delete(request: HttpRequest, team: Team, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(Rule, team=team, id=rule_id)
    evaluate.delete(rule.id)
    messages.success(request, f"Deleted “{rule.name}”.")
    return redirect("alert-list", team.slug)


SILENCE_HOURS = {"1": 1, "4": 4, "24": 24, "168": 168}


@require_POST
@team_permission("alerts.manage")
def rule_silence(request: HttpRequest, team: Team, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(Rule, team=team, id=rule_id)
    hours = request.POST.get("hours", "")
    if hours == "0":
        rule.silenced_until = None
        messages.success(request, "Silence lifted.")
    elif hours in SILENCE_HOURS:
        rule.silenced_until = timezone.now() + dt.timedelta(hours=SILENCE_HOURS[hours])
        messages.success(request, f"Silenced for {hours} h: states are still evaluated and "
                         "recorded, nothing is sent.")
    else:
        return HttpResponse("hours: one of 0, 1, 4, 24, 168", status=400,
                            content_type="text/plain")
    rule.save(update_fields=["silenced_until"])
    evaluate.reassess(rule.id)  # a silence closes a firing alert at the receiver now
    return redirect("alert-rule", team.slug, rule.id)


@team_permission("team.view")
def channel_list(request: HttpRequest, team: Team) -> HttpResponse:
    return _channels_page(request, team)


def _channels_page(request: HttpRequest, team: Team, *, error: FieldError | None = None,
                   data: dict | None = None, new_secret: str = "", created: Channel | None = None,
                   status: int = 200) -> HttpResponse:
    chans = list(Channel.objects.filter(team=team))
    last, waiting = {}, {}
    for ch in chans:
        last[ch.id] = ch.notifications.first()
        if ch.kind == ChannelKind.EMAIL:
            try:
                wanted = [a.strip() for a in ch.target.split(",")]
            except ValueError:  # key changed: the page says so through the channel's error
                wanted = []
            ok = set(channels.allowed_recipients(team, wanted))
            waiting[ch.id] = [a for a in wanted if a not in ok]
    test = None
    if request.GET.get("test", "").isdigit():
        row = Notification.objects.select_related("channel").filter(
            channel__team=team, kind="test", id=int(request.GET["test"])).first()
        if row is not None:
            test = {"row": row, **test_status(row)}
    return render(request, "alerts/channels.html", {
        "team": team, "channels": [(c, last[c.id], waiting.get(c.id)) for c in chans],
        "test": test,
        "kinds": ChannelKind.choices, "digests": Digest.choices,
        "error": error, "d": data or {"kind": "email", "send_resolved": True},
        "new_secret": new_secret, "created": created,
        "can_manage": "channels.manage" in request.team_actions,
        "max_attempts": settings.ALERTS_MAX_ATTEMPTS,
        "labels": {k: channels.REGISTRY[k].target_label for k in channels.REGISTRY},
    }, status=status)


@require_POST
@team_permission("channels.manage")
def channel_new(request: HttpRequest, team: Team) -> HttpResponse:
    data = {"name": request.POST.get("name", ""), "kind": request.POST.get("kind", ""),
            "target": request.POST.get("target", ""),
            "send_resolved": "send_resolved" in request.POST,
            "digest": request.POST.get("digest", ""),
            "digest_hour": request.POST.get("digest_hour", "")}
    try:
        ch, secret = channels.create(team, data, site_url=request.build_absolute_uri("/"))
    except FieldError as exc:
        data.pop("target")  # never echo a credential back into the page
        return _channels_page(request, team, error=exc, data=data, status=400)
    if ch.kind == ChannelKind.EMAIL:
        waiting = [r.id for r in channels.needs_confirmation(team, ch.target.split(", "))]
        if waiting:
            _on_commit_task(tasks.confirm_addresses, waiting, ch.site_url)
    return _channels_page(request, team, new_secret=secret, created=ch)


def _on_commit_task(task, *args) -> None:
    """Queue a task once the request's transaction commits; a broker that is down is logged,
    never a 500 (Redis is a broker, not a gate)."""
    def hand_over() -> None:
        try:
            task.delay(*args)
        except Exception:
            log.warning("%s%r not queued", task.name, args, exc_info=True)

    transaction.on_commit(hand_over)


@require_POST
@team_permission("channels.manage")
def channel_test(request: HttpRequest, team: Team, channel_id: int) -> HttpResponse:
    """Writes the test rows and hands the send to a worker: the page answers at once and
    shows the result when it arrives (a receiver that takes 10 s holds no web worker)."""
    ch = get_object_or_404(Channel.objects.select_related("team"), team=team, id=channel_id)
    ids = notify.queue_test(ch)

    # Broker down: the rows stay pending and beat's delivery sends them.
    _on_commit_task(tasks.send_test, ch.id, ids)
    return redirect(f"{reverse('alert-channels', args=[team.slug])}?test={ids[0]}")


@team_permission("team.view")
def channel_test_status(request: HttpRequest, team: Team, channel_id: int,
                        notification_id: int) -> JsonResponse:
    n = get_object_or_404(Notification, channel__team=team, channel_id=channel_id,
                          id=notification_id, kind="test")
    return JsonResponse(test_status(n))


def test_status(n: Notification) -> dict:
    done = n.status in ("sent", "failed")
    if n.status == "sent":
        text = f"Test sent to {n.channel.name} with live figures."
    elif n.status == "failed":
        text = f"Test to {n.channel.name} failed: {n.error}"
    else:
        text = f"Test to {n.channel.name}: sending…"
    return {"status": n.status, "done": done, "text": text, "error": n.error or None,
            "error_class": n.error_class or None}


@require_POST
@team_permission("channels.manage")
def channel_enable(request: HttpRequest, team: Team, channel_id: int) -> HttpResponse:
    ch = get_object_or_404(Channel, team=team, id=channel_id)
    ch.enable()
    messages.success(request, f"{ch.name} is enabled again.")
    return redirect("alert-channels", team.slug)


@require_POST
@team_permission("channels.manage")
def channel_delete(request: HttpRequest, team: Team, channel_id: int) -> HttpResponse:
    ch = get_object_or_404(Channel, team=team, id=channel_id)
    ch.delete()
    messages.success(request, f"Deleted channel {ch.name}.")
    return redirect("alert-channels", team.slug)


def confirm_email(request: HttpRequest, token: str) -> HttpResponse:
    """The link in a confirmation e-mail: no login (the recipient may have no account); the
    token is the secret. Confirming takes a button press, so a mail scanner that opens links
    does not confirm for the recipient."""
    row = get_object_or_404(EmailAddress.objects.select_related("team"), token=token)
    if request.method == "POST" and row.confirmed_at is None:
        row.confirmed_at = timezone.now()
        row.save(update_fields=["confirmed_at"])
    return render(request, "alerts/confirm.html", {"row": row})
