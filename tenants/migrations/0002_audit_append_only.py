from django.db import migrations

# The audit log is append-only: the database itself refuses UPDATE and DELETE on it, so no code
# path (admin, shell, a bug) can rewrite history. TRUNCATE stays possible for the table's owner
# (the test runner empties tables with it); production grants the app role no TRUNCATE.
SQL = """
CREATE OR REPLACE FUNCTION tenants_auditevent_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'the audit log is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tenants_auditevent_no_update_delete
  BEFORE UPDATE OR DELETE ON tenants_auditevent
  FOR EACH ROW EXECUTE FUNCTION tenants_auditevent_append_only();
"""
REVERSE = """
DROP TRIGGER IF EXISTS tenants_auditevent_no_update_delete ON tenants_auditevent;
DROP FUNCTION IF EXISTS tenants_auditevent_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]
    operations = [migrations.RunSQL(SQL, REVERSE)]
