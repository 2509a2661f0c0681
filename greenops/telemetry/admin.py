from django.contrib import admin

from greenops.telemetry.models import Gpu, Host, RetentionMark


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "hostname", "instance_type", "agent_version", "last_seen"]
    exclude = ["token_hash"]
    inlines = [GpuInline]


@admin.register(RetentionMark)
class RetentionMarkAdmin(admin.ModelAdmin):
    """What the last retention run did per table, or why it refused a drop."""

    list_display = ["table_name", "dropped_before", "checked_at", "status"]
    readonly_fields = ["table_name", "dropped_before", "checked_at", "status"]

    def has_add_permission(self, request) -> bool:
        return False  # written by the retention task only
