# The idempotency record moved to the ground layer (core): state only, the table stays.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0003_api_tokens"),
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="IdempotencyRecord")],
            database_operations=[],
        ),
    ]
