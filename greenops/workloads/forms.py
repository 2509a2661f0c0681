"""Registering and editing workloads: one form for pages and the JSON API.

Who may edit is the team permission matrix's "workloads.manage" (greenops/teams/permissions.py).
"""

from __future__ import annotations

from django import forms

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
                  "checkpoint_interval_min", "latency_critical"]
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
        from django.utils.text import slugify

        slug = self.cleaned_data.get("slug") or slugify(self.cleaned_data.get("name", ""))[:100]
        if not slug:
            raise forms.ValidationError("Give the workload a name or slug")
        clash = Workload.objects.filter(team=self.team, slug=slug).exclude(pk=self.instance.pk)
        if clash.exists():
            raise forms.ValidationError("Another workload of this team uses this slug")
        return slug


def first_error(form: forms.Form) -> tuple[str, str]:
    """(field, message) of the first form error, for the API's error body."""
    for field, errors in form.errors.items():
        return ("" if field == "__all__" else field), str(errors[0])
    return "", "invalid"
