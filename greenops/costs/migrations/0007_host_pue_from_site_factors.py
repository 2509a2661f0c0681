"""The on-premises cost settings' own PUE goes: one PUE per host, from the carbon app's site
factors. A PUE someone set there on purpose (anything but the old 1.56 default) moves to the
host's PUE override, unless the host already has one, so no figure changes silently."""

from django.db import migrations


def keep_chosen_pue(apps, schema_editor):
    HostCostConfig = apps.get_model("costs", "HostCostConfig")
    HostSite = apps.get_model("carbon", "HostSite")
    for config in HostCostConfig.objects.exclude(pue=1.56):
        site, _ = HostSite.objects.get_or_create(host_id=config.host_id)
        if site.pue_override is None:
            site.pue_override = config.pue
            site.save(update_fields=["pue_override"])


class Migration(migrations.Migration):

    dependencies = [
        ("costs", "0006_load_cloud_price_snapshot_azure"),
        ("carbon", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(keep_chosen_pue, migrations.RunPython.noop),
        migrations.RemoveField(model_name="hostcostconfig", name="pue"),
    ]
