from django.contrib import admin

from greenops.carbon.models import HostSite, Site


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "pue", "grid_intensity_override_g_per_kwh", "country", "region")
    list_filter = ("team",)


@admin.register(HostSite)
class HostSiteAdmin(admin.ModelAdmin):
    list_display = ("host", "site", "pue_override")
