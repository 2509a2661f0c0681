# HostEnergyHour now belongs to telemetry (telemetry's 0014 takes it over in state, keeping the
# table carbon_hostenergyhour): removed from carbon's state only, nothing is dropped.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("carbon", "0003_factors_periods"),
        ("telemetry", "0014_hostenergyhour"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="HostEnergyHour")],
        ),
    ]
