# Records written before issue 13 kept the whole answer of `POST /api/v1/tokens/`, the token's
# secret included. The answer is now kept without it; this removes it from the older records
# (a retry with their key is then answered `409 secret_shown_once`, like a new one).

from django.db import migrations

SECRET_FIELDS = {"/api/v1/tokens/": ("token",)}


def forget_secrets(apps, schema_editor):
    record_model = apps.get_model("core", "IdempotencyRecord")
    for path, fields in SECRET_FIELDS.items():
        for record in record_model.objects.filter(path=path).iterator():
            body = record.response_body
            if isinstance(body, dict) and any(name in body for name in fields):
                for name in fields:
                    body.pop(name, None)
                record.save(update_fields=["response_body"])


class Migration(migrations.Migration):
    dependencies = [("core", "0001_initial")]

    operations = [migrations.RunPython(forget_secrets, migrations.RunPython.noop)]
