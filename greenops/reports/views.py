"""Pages of the reports app: the team's Reports page, one report, its status and its files.
Thin: access check, domain call, render."""

from __future__ import annotations

import io

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from greenops.errors import FieldError
from greenops.reports import generate, present
from greenops.reports.models import Report, Status, Subscription, Trigger
from greenops.reports.month_figures import Month, current_month, month_window
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission

MONTHS_OFFERED = 12


def _months(team: Team) -> list[Month]:
    m, out = current_month(team), []
    for _ in range(MONTHS_OFFERED):
        out.append(m)
        m = m.previous()
    return out


def status_dict(report: Report) -> dict:
    """What the page polls and the API returns about one generation."""
    slug = report.team.slug
    files = {}
    if report.revision:
        files = {ext: reverse("report-download", args=[slug, report.id, ext])
                 for ext in ("pdf", "csv")}
    return {
        "id": report.id, "month": report.month_str, "status": report.status,
        "progress_pct": report.progress_pct, "stage": report.stage,
        "revision": report.revision, "closed": report.closed,
        "unchanged_from_revision": report.unchanged_from.revision if report.unchanged_from
        else None,
        "unchanged_from_id": report.unchanged_from_id,
        "error": report.error, "trigger": report.trigger,
        "created_at": report.created_at.isoformat(),
        "finished_at": report.finished_at.isoformat() if report.finished_at else None,
        "page": reverse("report-detail", args=[slug, report.id]),
        "files": files,
        "emailed_to": len(report.emailed_to or []), "email_error": report.email_error,
        "s3_keys": report.s3_keys, "s3_error": report.s3_error,
    }


def _page(request: HttpRequest, team: Team, error: str = "", status: int = 200) -> HttpResponse:
    rows = list(Report.objects.filter(team=team).select_related("unchanged_from")
                .order_by("-month", "-created_at")[:200])
    by_month: dict[str, list[Report]] = {}
    for r in rows:
        by_month.setdefault(r.month_str, []).append(r)
    months = _months(team)
    return render(request, "reports/list.html", {
        "team": team, "by_month": by_month, "months": months,
        "default_month": str(months[1]),
        "subscribed": Subscription.objects.filter(team=team, user=request.user).exists(),
        "subscribers": Subscription.objects.filter(team=team).count(),
        "watch": [status_dict(r) for r in rows if r.active
                  or str(r.id) == request.GET.get("watch")],
        "error": error, "grace_hours": settings.REPORTS_GRACE_HOURS,
        "recheck_days": settings.REPORTS_RECHECK_DAYS,
    }, status=status)


@team_permission("team.view")
def reports(request: HttpRequest, team: Team) -> HttpResponse:
    return _page(request, team)


@require_POST
@team_permission("reports.manage")
def generate_view(request: HttpRequest, team: Team) -> HttpResponse:
    try:
        month = Month.parse(request.POST.get("month", ""))
    except FieldError as exc:
        return _page(request, team, f"month: {exc.message}", status=400)
    report = generate.request(team, month, Trigger.PAGE, request.user)
    return redirect(f"{reverse('reports', args=[team.slug])}?watch={report.id}")


@team_permission("team.view")
def status(request: HttpRequest, team: Team, report_id: int) -> JsonResponse:
    report = get_object_or_404(Report.objects.select_related("team", "unchanged_from"),
                               team=team, id=report_id)
    return JsonResponse(status_dict(report))


@team_permission("team.view")
def detail(request: HttpRequest, team: Team, report_id: int) -> HttpResponse:
    report = get_object_or_404(Report.objects.select_related("unchanged_from"), team=team,
                               id=report_id)
    shown = report.unchanged_from if report.unchanged_from_id else report
    others = (Report.objects.revisions().filter(team=team, month=report.month)
              .order_by("-revision"))
    fig = shown.figures
    return render(request, "reports/detail.html", {
        "team": team, "report": report, "shown": shown, "fig": fig,
        "sections": present.sections(fig) if fig else [],
        "methodology": present.methodology(fig) if fig else [],
        "window_line": present.window_line(fig) if fig else "",
        "revisions": others, "window": month_window(team, Month.of(report.month), report.time_zone),
        "status": status_dict(report),
    })


@team_permission("team.view")
def download(request: HttpRequest, team: Team, report_id: int, ext: str) -> HttpResponse:
    report = get_object_or_404(Report, team=team, id=report_id, status=Status.DONE,
                               revision__isnull=False)
    data = report.pdf_data if ext == "pdf" else report.csv_data
    kind = "application/pdf" if ext == "pdf" else "text/csv; charset=utf-8"
    return FileResponse(io.BytesIO(bytes(data)), as_attachment=True,
                        filename=report.file_name(ext), content_type=kind)


@require_POST
@team_permission("team.view")
def subscribe(request: HttpRequest, team: Team) -> HttpResponse:
    """Subscribe or unsubscribe yourself: anyone who may read the reports may get them."""
    if request.POST.get("subscribe") == "1":
        Subscription.objects.get_or_create(team=team, user=request.user)
    else:
        Subscription.objects.filter(team=team, user=request.user).delete()
    return redirect("reports", team.slug)
