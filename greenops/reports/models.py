"""Monthly reports: one row per generation, with its status, the figures it stored and its files.

A month's report is a series of revisions. Generating a month again either finds the same
figures (the request is answered by the standing revision, nothing is rewritten) or different
ones (late telemetry, an audited recompute): that is the next revision, with the difference
stated, and every earlier revision stays downloadable.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from greenops.teams.models import Team


class Status(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class Trigger(models.TextChoices):
    PAGE = "page", "Reports page"
    API = "api", "API"
    COMMAND = "command", "manage.py report"
    SCHEDULE = "schedule", "Monthly schedule"


class ReportQuerySet(models.QuerySet):
    def revisions(self) -> ReportQuerySet:
        return self.filter(status=Status.DONE, revision__isnull=False)


class Report(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="reports")
    month = models.DateField(help_text="First day of the calendar month, in the team's zone")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    progress_pct = models.PositiveSmallIntegerField(default=0)
    stage = models.CharField(max_length=100, blank=True)
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.PAGE)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True,
                                     blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Set when done with figures that differ from the previous revision (1 for the first).
    revision = models.PositiveIntegerField(null=True, blank=True)
    # Done with the same figures as an earlier revision: that revision stands, no new files.
    unchanged_from = models.ForeignKey("self", models.SET_NULL, null=True, blank=True,
                                       related_name="+")
    # The zone whose calendar month this is, fixed when requested (Team.time_zone then).
    time_zone = models.CharField(max_length=64, default="UTC")
    closed = models.BooleanField(default=False, help_text="The month had ended when generated")
    figures = models.JSONField(null=True, blank=True)
    difference = models.JSONField(null=True, blank=True)  # against the previous revision
    csv_data = models.BinaryField(null=True, blank=True)
    pdf_data = models.BinaryField(null=True, blank=True)
    # Delivery: email to the team's report subscribers, optional copy in S3.
    emailed_to = models.JSONField(default=list, blank=True)
    email_error = models.TextField(blank=True)
    s3_keys = models.JSONField(default=list, blank=True)
    s3_error = models.TextField(blank=True)

    objects = ReportQuerySet.as_manager()

    class Meta:
        ordering = ["-month", "-created_at"]
        constraints = [models.UniqueConstraint(
            fields=["team", "month", "revision"], condition=models.Q(revision__isnull=False),
            name="report_revision_per_month")]
        indexes = [models.Index(fields=["team", "month"], name="report_team_month")]

    def __str__(self) -> str:
        return f"{self.team.slug} {self.month_str} r{self.revision or '-'} ({self.status})"

    @property
    def month_str(self) -> str:
        return self.month.strftime("%Y-%m")

    @property
    def active(self) -> bool:
        return self.status in (Status.PENDING, Status.RUNNING)

    def file_name(self, ext: str) -> str:
        return f"greenops-{self.team.slug}-{self.month_str}-r{self.revision}.{ext}"

    def set_progress(self, pct: int, stage: str) -> None:
        Report.objects.filter(id=self.id).update(progress_pct=pct, stage=stage[:100])
        self.progress_pct, self.stage = pct, stage


class Subscription(models.Model):
    """A team member who gets each new report revision by email."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="report_subscriptions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"],
                                               name="report_subscription_once")]
