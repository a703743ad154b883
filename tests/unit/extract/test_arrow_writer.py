"""The files a slice task writes appear whole or not at all: tasks write outside Spark's commit
protocol, so a task that fails (or a retried one) must never leave a half file under a name a
manifest or the lake could take (local folder; pure pyarrow)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.extract.arrow_writer import STAGING_SCHEMA, ParquetFile, write_tables
from pipeline.extract.slice_task import _write_staging
from pipeline.settings.model import StorageOptions
from pipeline.storage.folder import folder_of

ROWS = pa.table({"event_id": ["a", "b"], "event_type": ["x", "y"],
                 "event_timestamp": [datetime(2026, 1, 1, tzinfo=UTC)] * 2, "details": ["{}", None],
                 "created_at": [datetime(2026, 1, 1, tzinfo=UTC)] * 2}, schema=STAGING_SCHEMA)


def _rows_then_a_lost_source():
    yield from ROWS.to_batches()
    raise ConnectionError("server closed the connection unexpectedly")


def test_a_file_appears_under_its_name_only_once_written_whole(tmp_path):
    folder = folder_of(str(tmp_path / "batch"), StorageOptions())
    file = ParquetFile(folder, "part-00000.parquet", STAGING_SCHEMA)
    file.write(ROWS)
    assert not (tmp_path / "batch" / "part-00000.parquet").exists()
    assert folder.files(".parquet") == []  # the partial file is hidden from every listing
    file.close()
    assert [p.name for p in (tmp_path / "batch").iterdir()] == ["part-00000.parquet"]
    assert pq.read_table(tmp_path / "batch" / "part-00000.parquet").num_rows == 2


def test_a_slice_that_fails_mid_read_leaves_no_file_and_its_retry_writes_it_whole(tmp_path):
    folder = folder_of(str(tmp_path / "batch"), StorageOptions())
    with pytest.raises(ConnectionError):
        _write_staging(_rows_then_a_lost_source(), folder, "part-00003.parquet", STAGING_SCHEMA)
    assert list((tmp_path / "batch").iterdir()) == []
    assert _write_staging(iter(ROWS.to_batches()), folder, "part-00003.parquet", STAGING_SCHEMA) == 2
    assert [p.name for p in (tmp_path / "batch").iterdir()] == ["part-00003.parquet"]


def test_driver_staging_that_fails_leaves_only_the_files_it_finished(tmp_path, monkeypatch):
    from pipeline.extract import arrow_writer

    monkeypatch.setattr(arrow_writer, "ROWS_PER_FILE", 2)  # one file per table
    folder = folder_of(str(tmp_path / "batch"), StorageOptions())

    def tables():
        yield ROWS
        yield from _rows_then_a_lost_source()

    with pytest.raises(ConnectionError):
        write_tables(folder, tables())
    assert [p.name for p in (tmp_path / "batch").iterdir()] == ["part-00000.parquet"]
