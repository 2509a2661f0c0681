from django.contrib import admin

from greenops.costs.models import HostCostConfig, InstanceType, Price, PriceRefresh


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ("instance_type", "region", "option", "term_years", "payment", "usd_per_hour",
                    "method", "as_of")
    list_filter = ("provider", "region", "option", "method")
    search_fields = ("instance_type",)


@admin.register(InstanceType)
class InstanceTypeAdmin(admin.ModelAdmin):
    list_display = ("name", "provider", "gpu_model", "gpu_count", "gpu_memory_gib")


@admin.register(HostCostConfig)
class HostCostConfigAdmin(admin.ModelAdmin):
    list_display = ("host", "term_years", "payment", "hardware_usd", "electricity_usd_per_kwh")


@admin.register(PriceRefresh)
class PriceRefreshAdmin(admin.ModelAdmin):
    list_display = ("started_at", "status", "prices_updated", "message")
