from __future__ import annotations

from django import forms

from greenops.teams.models import Role


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100)


class InviteForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
