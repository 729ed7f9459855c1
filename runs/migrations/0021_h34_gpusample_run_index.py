"""GpuSample loses its run_id index: the natural key (run, node, GPU, ts) leads with the run.

Every index of the raw table is paid for by each sample the ingest inserts (issue 34's
faster store path). The state change is Django's `db_index=False`; the database change is
the DROP INDEX alone, where Django's own AlterField would also drop and re-add (so
revalidate over the whole table) the run's foreign key. On PostgreSQL the index is the
partitioned parent's, and dropping it drops each partition's.
"""

import django.db.models.deletion
from django.db import migrations, models

INDEX = "runs_gpusample_run_id_ae7cb26a"


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0020_h30a_run_envelope"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="gpusample",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="gpu_samples",
                        to="runs.run",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{INDEX}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{INDEX}" ON "runs_gpusample" ("run_id")',
                ),
            ],
        ),
    ]
