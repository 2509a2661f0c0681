from django.contrib import admin

from greenops.teams.models import AuditEvent, Invitation, Membership, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    inlines = [MembershipInline]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "team", "actor_label", "action", "target"]
    list_filter = ["action"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # the log is evidence: never edited


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["email", "team", "role", "created_at", "expires_at", "accepted_at"]
    exclude = ["token_hash"]
