"""The rollups' natural keys become (run, time, node, GPU): a run's minutes or hours in a time
window are one index range, and its last minute one index probe (see GpuMinute.Meta). Their
own run index goes: the natural key starts with run. Same columns in the key, so ingest's
upserts are unchanged. The keys are rebuilt in this migration's transaction: writes to the
rollup tables wait for it (21 s for 8.8 million hours and 2.9 million minutes on a 2-core
machine). The run indexes are dropped by name, with `db_index=False` in the model state only:
an AlterField would also drop and re-add the foreign keys, re-checking every row against
runs_run while holding a lock on it that blocks the run collector."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_gpusample_nvlink"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="gpuhour",
            name="gpuhour_natural_key",
        ),
        migrations.RemoveConstraint(
            model_name="gpuminute",
            name="gpuminute_natural_key",
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="gpuhour",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="gpu_hours",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="gpuminute",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="gpu_minutes",
                        to="runs.run",
                    ),
                ),
            ],
            # The names Django gave these indexes in 0001/0003 (a hash of table and column).
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX IF EXISTS runs_gpuhour_run_id_aea98cf1",
                    reverse_sql="CREATE INDEX runs_gpuhour_run_id_aea98cf1 ON runs_gpuhour (run_id)",
                ),
                migrations.RunSQL(
                    "DROP INDEX IF EXISTS runs_gpuminute_run_id_f17cbc81",
                    reverse_sql="CREATE INDEX runs_gpuminute_run_id_f17cbc81 ON runs_gpuminute (run_id)",
                ),
            ],
        ),
        migrations.AddConstraint(
            model_name="gpuhour",
            constraint=models.UniqueConstraint(fields=("run", "hour", "node", "gpu_index"), name="gpuhour_natural_key"),
        ),
        migrations.AddConstraint(
            model_name="gpuminute",
            constraint=models.UniqueConstraint(
                fields=("run", "minute", "node", "gpu_index"), name="gpuminute_natural_key"
            ),
        ),
    ]
