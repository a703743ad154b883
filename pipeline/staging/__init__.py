"""Staged batches between extraction and promotion: the contract (:mod:`.contract`) on a
folder or object storage (:mod:`.location`, on :mod:`pipeline.storage`)."""

from pipeline.staging.contract import (
    FAILED,
    FAILURE,
    MANIFEST,
    PREFIX,
    RUNNING,
    LakeFile,
    Manifest,
    StagedBatch,
    abandoned_batches,
    batch_dir,
    claim_batch,
    clean_stale,
    complete_batches,
    failed_batches,
    is_complete,
    is_set_aside,
    new_batch_id,
    parquet_files,
    pending_lake_files,
    read_manifest,
    release_batch,
    remove_batch,
    restore_failed,
    running_batches,
    seal,
    set_aside,
)
from pipeline.staging.location import staging_root, table_dir

__all__ = ["FAILED", "FAILURE", "MANIFEST", "PREFIX", "RUNNING", "LakeFile", "Manifest", "StagedBatch",
           "abandoned_batches", "batch_dir", "claim_batch", "clean_stale", "complete_batches",
           "failed_batches", "is_complete", "is_set_aside", "new_batch_id", "parquet_files",
           "pending_lake_files", "read_manifest", "running_batches",
           "release_batch", "remove_batch", "restore_failed", "seal", "set_aside", "staging_root",
           "table_dir"]
