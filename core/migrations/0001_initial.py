# The idempotency record moved here from tenants: state only, the table stays where it is.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("tenants", "0003_api_tokens"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="IdempotencyRecord",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("key", models.CharField(max_length=200)),
                        ("method", models.CharField(max_length=10)),
                        ("path", models.CharField(max_length=300)),
                        ("body_hash", models.CharField(max_length=64)),
                        ("status_code", models.PositiveSmallIntegerField()),
                        ("response_body", models.JSONField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "tenants_idempotencyrecord",
                        "constraints": [models.UniqueConstraint(fields=("user", "key"), name="unique_idempotency_key")],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
