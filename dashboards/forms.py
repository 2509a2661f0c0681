"""Forms of the pages dashboards/ owns: a host's commercial facts and its site."""

from __future__ import annotations

from django import forms

from greenops.carbon.models import HostSite, Site
from greenops.telemetry.models import Host

PROVIDERS = [("aws", "AWS"), ("gcp", "Google Cloud"), ("azure", "Azure"),
             ("on_prem", "On-premises"), ("", "Other / unknown")]


class HostEditForm(forms.ModelForm):
    """What prices a host (provider, region, instance type, purchase option) and where it runs
    (its site: PUE and grid intensity). The agent reports some of these at enrollment; a person
    corrects them here."""

    provider = forms.ChoiceField(choices=PROVIDERS, required=False)
    site = forms.ModelChoiceField(queryset=Site.objects.none(), required=False,
                                  empty_label="No site (default PUE, grid by country/region)")

    class Meta:
        model = Host
        fields = ["provider", "region", "instance_type", "purchase_option", "country"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["site"].queryset = Site.objects.filter(team=self.instance.team)
        link = HostSite.objects.filter(host=self.instance).first()
        self.fields["site"].initial = link.site_id if link else None

    def clean_instance_type(self) -> str:
        return self.cleaned_data["instance_type"].strip()

    def clean_country(self) -> str:
        value = self.cleaned_data["country"].strip().upper()
        if value and (len(value) != 3 or not value.isalpha()):
            raise forms.ValidationError("An ISO 3166 alpha-3 code, e.g. USA or DEU.")
        return value

    def changes(self) -> dict[str, list]:
        """{field: [before, after]} for the audit log."""
        out = {f: [self.initial.get(f), self.cleaned_data.get(f)] for f in self.changed_data
               if f != "site"}
        if "site" in self.changed_data:
            before = Site.objects.filter(id=self.initial.get("site")).first()
            after = self.cleaned_data.get("site")
            out["site"] = [before.name if before else None, after.name if after else None]
        return out

    def save(self, commit: bool = True) -> Host:
        host = super().save(commit)
        if commit:
            site = self.cleaned_data.get("site")
            HostSite.objects.update_or_create(host=host, defaults={"site": site})
        return host
