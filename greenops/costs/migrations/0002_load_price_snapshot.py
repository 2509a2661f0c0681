"""Load the bundled, dated AWS price snapshot so a fresh install can price hosts at once."""

from django.db import migrations


def load(apps, schema_editor):
    from greenops.costs.catalog import load_snapshot

    load_snapshot(instance_type_model=apps.get_model("costs", "InstanceType"),
                  price_model=apps.get_model("costs", "Price"))


class Migration(migrations.Migration):
    dependencies = [("costs", "0001_initial")]

    operations = [migrations.RunPython(load, migrations.RunPython.noop)]
