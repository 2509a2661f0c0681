"""Generating a report: request, claim, compute, store as a revision, deliver.

Work is claimed with an update that succeeds once, so a task delivered twice (Redis redelivery,
a beat tick overlapping a page request) generates once. Figures are compared with the month's
latest revision: the same figures leave that revision standing; different ones become the next
revision with the difference stored, and the earlier revisions stay as they were.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from greenops import db_router
from greenops.queueing import publish_on_commit

# tasks imports this module too: each uses the other only inside functions, never at import.
from greenops.reports import csv_writer, month_figures, present, tasks
from greenops.reports.models import Report, Status, Subscription, Trigger
from greenops.reports.month_figures import Month
from greenops.teams.models import Team

log = logging.getLogger(__name__)


# A generation takes seconds to a few minutes; one running far longer lost its worker.
STALE_RUNNING = dt.timedelta(minutes=30)
# A pending report whose queue message was lost (Redis restarted) is sent again after this.
LOST_PENDING = dt.timedelta(minutes=10)


def request(team: Team, month: Month, trigger: str = Trigger.PAGE, user=None,
            enqueue: bool = True) -> Report:
    """A pending report for the month, or the one already pending or running for it."""
    with transaction.atomic():
        Team.objects.select_for_update().filter(id=team.id).first()  # one request at a time
        active = Report.objects.filter(team=team, month=month.first_day,
                                       status__in=[Status.PENDING, Status.RUNNING]).first()
        if active is not None:
            return active
        report = Report.objects.create(team=team, month=month.first_day, trigger=trigger,
                                       time_zone=month_figures.team_zone_name(team),
                                       requested_by=user if user and user.is_authenticated
                                       else None, stage="queued")
        if enqueue:
            publish_on_commit(tasks.generate_report, report.id)  # lost: schedule() sends it again
    return report


def _jsonable(fig: dict) -> dict:
    # Exactly what the JSONField will give back, so a fresh computation compares like with like.
    return json.loads(json.dumps(fig))


def run(report_id: int, now: dt.datetime | None = None) -> Report | None:
    """Generate a claimed report; None when another worker has it or it is already done."""
    wall = timezone.now()
    now = now or wall

    def finished() -> dt.datetime:
        # `now` plus the time the work took: the real finish time unless a caller (a test,
        # a replayed schedule) gave its own clock.
        return now + (timezone.now() - wall)

    # A report left "running" by a worker that died is claimable again once it is stale.
    claimable = Q(status=Status.PENDING) | Q(status=Status.RUNNING,
                                             started_at__lt=now - STALE_RUNNING)
    claimed = Report.objects.filter(claimable, id=report_id).update(
        status=Status.RUNNING, started_at=now, progress_pct=1, stage="started") == 1
    if not claimed:
        return None
    report = Report.objects.select_related("team").get(id=report_id)
    try:
        # The month's reads on the read replica when there is one (greenops/db_router.py).
        fig = _jsonable(db_router.replica_reads(
            month_figures.month_figures, report.team, Month.of(report.month), now,
            progress=report.set_progress, zone=report.time_zone))
        report.set_progress(80, "writing CSV and PDF")
        new_revision = _store(report, fig, finished)
    except Exception as exc:  # the page must say why, not spin for ever
        log.exception("report %s failed", report_id)
        Report.objects.filter(id=report_id).update(
            status=Status.FAILED, finished_at=finished(), stage="failed",
            error=f"{type(exc).__name__}: {exc}"[:2000])
        report.refresh_from_db()
        return report
    if new_revision:
        deliver(report)
    report.refresh_from_db()
    return report


def _store(report: Report, fig: dict, finished: Callable[[], dt.datetime]) -> bool:
    """Save as the next revision, or as unchanged from the latest. True for a new revision."""
    with transaction.atomic():
        Team.objects.select_for_update().filter(id=report.team_id).first()
        latest = (Report.objects.revisions().filter(team=report.team_id, month=report.month)
                  .order_by("-revision").first())
        diff = month_figures.difference(latest.figures, fig) if latest is not None else None
        report.figures = fig
        report.closed = bool(fig["closed"])
        report.status, report.progress_pct, report.finished_at = Status.DONE, 100, finished()
        # A provisional revision with the same figures still gets a closed successor: the
        # month's final report must say it is final.
        if latest is not None and not diff and (latest.closed or not report.closed):
            report.unchanged_from = latest
            report.stage = f"no change since revision {latest.revision}"
            report.save()
            return False
        report.revision = latest.revision + 1 if latest else 1
        report.difference = diff
        report.csv_data = csv_writer.write(fig)
        # reportlab and fontTools load only where a PDF is written (a worker), not in every
        # process that imports the URLconf (~0.35 s each on a 2-core machine).
        from greenops.reports import pdf_writer

        report.pdf_data = pdf_writer.write(fig, report.revision, diff,
                                           previous_provisional=latest is not None
                                           and not latest.closed)
        report.stage = f"revision {report.revision} ready"
        report.save()
        return True


def deliver(report: Report) -> None:
    """Email a closed month's new revision to the subscribers; copy both files to S3 if set.
    Failures are recorded on the report, which stays done and downloadable."""
    if report.closed:
        _email(report)
    if settings.REPORTS_S3_BUCKET:
        _upload(report)


def _email(report: Report) -> None:
    # Only people still in the team: someone who left keeps no access through old mail.
    to = sorted(set(Subscription.objects.filter(team=report.team,
                                                user__memberships__team=report.team)
                    .exclude(user__email="").values_list("user__email", flat=True)))
    if not to:
        return
    fig = report.figures
    subject = f"GreenOps report {report.team.name} {fig['month_label']}" + (
        f" (revision {report.revision})" if report.revision > 1 else "")
    lines = [f"{label}: {value}" for label, value, *_ in present.summary(fig).rows]
    if report.difference:
        lines.insert(0, f"This revision restates {len(report.difference)} figure(s) of "
                        f"revision {report.revision - 1}; the PDF lists them.")
    msg = EmailMessage(subject, "\n".join(lines), settings.DEFAULT_FROM_EMAIL, bcc=to)
    msg.attach(report.file_name("pdf"), bytes(report.pdf_data), "application/pdf")
    msg.attach(report.file_name("csv"), bytes(report.csv_data), "text/csv")
    try:
        msg.send()
    except Exception as exc:  # SMTP down: keep the report, say why it was not mailed
        Report.objects.filter(id=report.id).update(email_error=f"{type(exc).__name__}: {exc}")
        return
    Report.objects.filter(id=report.id).update(emailed_to=to, email_error="")


def s3_key(report: Report, ext: str) -> str:
    prefix = settings.REPORTS_S3_PREFIX
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return f"{prefix}{report.team.slug}/{report.month_str}/{report.file_name(ext)}"


def _upload(report: Report) -> None:
    import boto3  # ~0.6 s to import; only an S3 upload needs it

    client = boto3.client("s3", endpoint_url=settings.REPORTS_S3_ENDPOINT_URL or None,
                          region_name=settings.REPORTS_S3_REGION or None)
    keys = []
    try:
        for ext, data, kind in (("pdf", report.pdf_data, "application/pdf"),
                                ("csv", report.csv_data, "text/csv")):
            key = s3_key(report, ext)
            client.put_object(Bucket=settings.REPORTS_S3_BUCKET, Key=key, Body=bytes(data),
                              ContentType=kind)
            keys.append(key)
    except Exception as exc:  # no credentials, no bucket, network: recorded, not fatal
        Report.objects.filter(id=report.id).update(s3_keys=keys,
                                                   s3_error=f"{type(exc).__name__}: {exc}")
        return
    Report.objects.filter(id=report.id).update(s3_keys=keys, s3_error="")


# --- The monthly schedule --------------------------------------------------------------------

SCHEDULE_RETRIES = 3
RECHECK_EVERY = dt.timedelta(days=1)


def _due(team: Team, month: Month, now: dt.datetime, first: bool = True) -> bool:
    """Whether beat should generate this closed month now: its first report after the grace
    period, then once a day for REPORTS_RECHECK_DAYS after that first report, so late data
    (an agent replaying its spool) becomes a visible new revision instead of going unseen."""
    grace = dt.timedelta(hours=settings.REPORTS_GRACE_HOURS)
    if month_figures.month_window(team, month)[1] + grace > now:
        return False
    reports = Report.objects.filter(team=team, month=month.first_day)
    if reports.filter(status__in=[Status.PENDING, Status.RUNNING]).exists():
        return False
    done = reports.filter(closed=True, status=Status.DONE)
    earliest = done.order_by("finished_at").first()
    if earliest is None:
        if not first:
            return False
        failed = reports.filter(trigger=Trigger.SCHEDULE, status=Status.FAILED).count()
        return failed < SCHEDULE_RETRIES
    if now >= earliest.finished_at + dt.timedelta(days=settings.REPORTS_RECHECK_DAYS):
        return False
    latest = done.order_by("-finished_at").first()
    return now >= latest.finished_at + RECHECK_EVERY


def due_months(now: dt.datetime | None = None) -> list[tuple[Team, Month]]:
    """(team, month) pairs beat should generate now: each team's previous month, and the one
    before it while it is still being re-checked (never its first report: a team that starts
    mid-month gets no report for the month before it existed)."""
    now = now or timezone.now()
    out = []
    for team in Team.objects.filter(hosts__isnull=False).distinct():
        previous = month_figures.current_month(team, now).previous()
        if _due(team, previous.previous(), now, first=False):
            out.append((team, previous.previous()))
        if _due(team, previous, now):
            out.append((team, previous))
    return out


def schedule(now: dt.datetime | None = None) -> list[int]:
    """Request every due month's report, and send again the ones whose task was lost (a pending
    report nobody picked up, a running one whose worker died); returns the report ids."""
    now = now or timezone.now()
    ids = [request(team, month, Trigger.SCHEDULE).id for team, month in due_months(now)]
    lost = Report.objects.filter(
        Q(status=Status.PENDING, created_at__lt=now - LOST_PENDING)
        | Q(status=Status.RUNNING, started_at__lt=now - STALE_RUNNING)).exclude(id__in=ids)
    for report_id in lost.values_list("id", flat=True):
        tasks.generate_report.delay(report_id)
        ids.append(report_id)
    return ids
