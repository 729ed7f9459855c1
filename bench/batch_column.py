"""PostgreSQL's CPU to store one accepted 10,000-sample batch body, by column type (issue 34).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/<a bench database> .venv/bin/python bench/batch_column.py

Builds a body shaped as runs.ingest.record_batch writes it (8 GPUs x 1,250 instants, NVML's
dozen fields), then INSERTs it `--repeat` times into four scratch tables in turn, jsonb (main
before 0022), text with the default pglz, text with lz4 (0023), text uncompressed, and prints
the backend's CPU per insert (from /proc: the database must run on this machine) and the bytes
a stored body takes. The scratch tables are dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
from pathlib import Path

import psycopg

KINDS = {
    "jsonb": "rows jsonb NOT NULL",
    "text (pglz)": "rows text NOT NULL",
    "text (lz4)": "rows text COMPRESSION lz4 NOT NULL",
    "text (uncompressed)": "rows text NOT NULL",
}


def body() -> str:
    rng = random.Random(34)
    rows = [
        [1, 2, gpu, f"2026-12-03T10:{s // 60 % 60:02d}:{s % 60:02d}+00:00", rng.random() * 100, rng.random() * 100,
         float(rng.randint(0, 80 * 10**9)), None, 650.125, 700.0, 55.0, 1980.0, 2619.0, None, None, 0, None, None,
         None, None, None]
        for s in range(1250) for gpu in range(8)
    ]  # fmt: skip
    return '{"source":"nvml","rows":' + json.dumps(rows, separators=(",", ":"), sort_keys=True) + "}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    url = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    text = body()
    tick = os.sysconf("SC_CLK_TCK")
    with psycopg.connect(url, autocommit=True) as conn:
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()

        def cpu() -> float:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick

        tables = {kind: f"bench_batch_column_{i}" for i, kind in enumerate(KINDS)}
        for kind, table in tables.items():
            conn.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id serial PRIMARY KEY, {KINDS[kind]})")
            if kind == "text (uncompressed)":
                conn.execute(f"ALTER TABLE {table} ALTER COLUMN rows SET STORAGE EXTERNAL")
        spent: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(args.repeat):
            for kind, table in tables.items():
                cast = "jsonb" if kind == "jsonb" else "text"
                before = cpu()
                conn.execute(f"INSERT INTO {table} (rows) VALUES (%s::{cast})", [text])  # noqa: S608
                spent[kind].append(cpu() - before)
        print(f"one body: {len(text):,} bytes of JSON text; mean of {args.repeat} inserts each, alternated")
        for kind, table in tables.items():
            (size,) = conn.execute(f"SELECT pg_total_relation_size('{table}')").fetchone()
            mean = 1000 * statistics.mean(spent[kind])
            print(f"  {kind:20} backend CPU {mean:5.1f} ms, {size // args.repeat:,} bytes a body")
            conn.execute(f"DROP TABLE {table}")


if __name__ == "__main__":
    main()
