"""Variant pairs: two workloads, or two periods of one workload, that a team marked to be
compared side by side (fp16 vs int8, distilled vs teacher, batch 8 vs 32, a lower power cap).

A side without a period is compared over the range the page asks for; a side with one always
over that period (whole UTC hours, as the hour rollups are kept)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from greenops.teams.models import Team
from greenops.workloads.models import Workload


class VariantPair(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="variant_pairs")
    label = models.CharField(max_length=100)
    a_workload = models.ForeignKey(Workload, models.CASCADE, related_name="+")
    a_start = models.DateTimeField(null=True, blank=True)
    a_end = models.DateTimeField(null=True, blank=True)
    b_workload = models.ForeignKey(Workload, models.CASCADE, related_name="+")
    b_start = models.DateTimeField(null=True, blank=True)
    b_end = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, max_length=2000)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True,
                                   blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "label"], name="variant_label_per_team"),
            # A period is both ends or neither, and ends after it starts.
            models.CheckConstraint(
                condition=(models.Q(a_start__isnull=True, a_end__isnull=True)
                           | models.Q(a_start__isnull=False, a_end__gt=models.F("a_start"))),
                name="variant_a_period"),
            models.CheckConstraint(
                condition=(models.Q(b_start__isnull=True, b_end__isnull=True)
                           | models.Q(b_start__isnull=False, b_end__gt=models.F("b_start"))),
                name="variant_b_period"),
        ]

    def __str__(self) -> str:
        return self.label
