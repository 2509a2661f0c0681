"""Load the GCP price snapshot (a3-highgpu-8g, a3-megagpu-8g, a2-highgpu-1g/8g, a2-ultragpu-8g,
g2-standard-4/48; on-demand and Spot, two or three regions each) copied from SkyPilot's GCP
catalog. Rows a refresh or a later snapshot has already made newer are kept (load_snapshot
compares each row's date)."""

from django.db import migrations


def load(apps, schema_editor):
    from greenops.costs.catalog import DATA_DIR, load_snapshot

    load_snapshot(DATA_DIR / "cloud_prices_2025-01-01.json",
                  instance_type_model=apps.get_model("costs", "InstanceType"),
                  price_model=apps.get_model("costs", "Price"))


class Migration(migrations.Migration):
    dependencies = [("costs", "0004_unique_offer_on_sqlite_refresh_parts")]

    operations = [migrations.RunPython(load, migrations.RunPython.noop)]
