"""The columns each migration adds, as schema.py writes them out for a store opened only to be
read (no sqlite-utils), are those the migrations make (issue 39: read commands answer fast)."""

from __future__ import annotations

from sqlite_utils import Database

from npu_deploy.store.schema import MIGRATIONS, SCHEMA_VERSION, expected_columns


def test_the_columns_written_out_are_those_the_migrations_make():
    db = Database(memory=True)
    for version in range(1, SCHEMA_VERSION + 1):
        MIGRATIONS[version - 1](db)
        assert expected_columns(version) == {t.name: {c.name for c in t.columns}
                                             for t in db.tables}
    db.close()
