"""Load the 2026-11-09 AWS price snapshot: the June 2025 P4/P5 on-demand reductions, p5en and
p5.4xlarge on-demand, spot samples for P4/P5, in five regions. Rows a refresh has already made
newer are kept (load_snapshot compares each row's date)."""

from django.db import migrations


def load(apps, schema_editor):
    from greenops.costs.catalog import DATA_DIR, load_snapshot

    load_snapshot(DATA_DIR / "aws_prices_2026-11-09.json",
                  instance_type_model=apps.get_model("costs", "InstanceType"),
                  price_model=apps.get_model("costs", "Price"))


class Migration(migrations.Migration):
    dependencies = [("costs", "0002_load_price_snapshot")]

    operations = [migrations.RunPython(load, migrations.RunPython.noop)]
