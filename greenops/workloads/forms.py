"""Registering and editing workloads: one form for pages and the JSON API.

Who may edit is the team permission matrix's "workloads.manage" (greenops/teams/permissions.py).
"""

from __future__ import annotations

import re

from django import forms
from django.utils.text import slugify

from greenops.teams.models import Team
from greenops.telemetry.models import Gpu
from greenops.workloads.models import Workload


class GpuChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, gpu: Gpu) -> str:
        return f"{gpu.host.name} · GPU {gpu.index} ({gpu.uuid or 'no UUID'})"


class WorkloadForm(forms.ModelForm):
    gpus = GpuChoiceField(queryset=Gpu.objects.none(), required=False,
                          widget=forms.CheckboxSelectMultiple,
                          help_text="Specific GPUs on shared hosts")

    class Meta:
        model = Workload
        fields = ["name", "slug", "kind", "description", "hosts", "gpus", "interruptible",
                  "checkpoint_interval_min", "latency_critical", "served_model", "p99_target_ms",
                  "match_process", "match_namespace", "match_pod_prefix"]
        labels = {"p99_target_ms": "p99 latency target (ms)", "match_process": "Process name",
                  "match_namespace": "Kubernetes namespace", "match_pod_prefix": "Pod name prefix",
                  "checkpoint_interval_min": "Checkpoint every (minutes)"}
        widgets = {"hosts": forms.CheckboxSelectMultiple}

    def __init__(self, *args, team: Team, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.team = team
        self.instance.team = team
        self.fields["slug"].required = False
        self.fields["slug"].help_text = "Used by the API and the client; derived from the name"
        self.fields["hosts"].queryset = team.hosts.all()
        self.fields["gpus"].queryset = Gpu.objects.filter(host__team=team).select_related("host")

    def clean_slug(self) -> str:
        slug = self.cleaned_data.get("slug") or slugify(self.cleaned_data.get("name", ""))[:100]
        if not slug:
            raise forms.ValidationError("Give the workload a name or slug")
        clash = Workload.objects.filter(team=self.team, slug=slug).exclude(pk=self.instance.pk)
        if clash.exists():
            raise forms.ValidationError("Another workload of this team uses this slug")
        return slug


    def clean_match_process(self) -> str:
        v = self.cleaned_data.get("match_process", "").strip()
        if v and (any(c.isspace() or not c.isprintable() for c in v)):
            raise forms.ValidationError("A process name has no spaces or control characters")
        if v and not v.strip("*?"):
            raise forms.ValidationError("This pattern matches every process; name the program, "
                                        "e.g. tritonserver or python3*")
        return v

    def clean_match_namespace(self) -> str:
        v = self.cleaned_data.get("match_namespace", "").strip()
        if v and not _DNS_LABEL.fullmatch(v):
            raise forms.ValidationError("A Kubernetes namespace is lower-case letters, digits and "
                                        "'-', starting and ending with a letter or digit")
        return v

    def clean_match_pod_prefix(self) -> str:
        v = self.cleaned_data.get("match_pod_prefix", "").strip()
        if v and not _POD_PREFIX.fullmatch(v):
            raise forms.ValidationError("A pod name is lower-case letters, digits, '-' and '.'")
        if v and not (self.data.get(self.add_prefix("match_namespace")) or "").strip():
            raise forms.ValidationError("Give the namespace the pods run in as well")
        return v


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_POD_PREFIX = re.compile(r"[a-z0-9][-a-z0-9.]*")


def first_error(form: forms.Form) -> tuple[str, str]:
    """(field, message) of the first form error, for the API's error body."""
    for field, errors in form.errors.items():
        return ("" if field == "__all__" else field), str(errors[0])
    return "", "invalid"
