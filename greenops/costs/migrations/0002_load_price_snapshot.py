"""Load the bundled, dated AWS price snapshot so a fresh install can price hosts at once."""

from django.db import migrations


def load(apps, schema_editor):
    from greenops.costs.catalog import DATA_DIR, load_snapshot

    # Pinned to its own file: later snapshots are loaded by later migrations.
    load_snapshot(DATA_DIR / "aws_prices_2025-05-31.json",
                  instance_type_model=apps.get_model("costs", "InstanceType"),
                  price_model=apps.get_model("costs", "Price"))


class Migration(migrations.Migration):
    dependencies = [("costs", "0001_initial")]

    operations = [migrations.RunPython(load, migrations.RunPython.noop)]
