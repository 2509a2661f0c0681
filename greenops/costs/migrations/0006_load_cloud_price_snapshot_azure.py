"""Re-load the multi-cloud snapshot, which now also carries Azure GPU sizes (ND96isr_H100_v5,
ND96asr_v4, ND96amsr_A100_v4, NC24ads_A100_v4, NC4as_T4_v3, NV36ads_A10_v5; on-demand and Spot,
three US regions each) copied from SkyPilot's Azure catalog. 0005 loaded the file before the Azure
rows were added, so existing databases get them here. Idempotent: the GCP rows are rewritten with
the same figures, and a row a refresh or later snapshot has made newer is kept (load_snapshot
compares each row's date)."""

from django.db import migrations


def load(apps, schema_editor):
    from greenops.costs.catalog import DATA_DIR, load_snapshot

    load_snapshot(DATA_DIR / "cloud_prices_2025-01-01.json",
                  instance_type_model=apps.get_model("costs", "InstanceType"),
                  price_model=apps.get_model("costs", "Price"))


class Migration(migrations.Migration):
    dependencies = [("costs", "0005_load_cloud_price_snapshot_2025_01_01")]

    operations = [migrations.RunPython(load, migrations.RunPython.noop)]
