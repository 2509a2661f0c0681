from django.contrib import admin

from greenops.telemetry.models import Gpu, Host


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "hostname", "instance_type", "agent_version", "last_seen"]
    exclude = ["token_hash"]
    inlines = [GpuInline]
