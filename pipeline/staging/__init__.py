"""Staged batches between extraction and promotion: the contract (:mod:`.contract`) on a
folder or object storage (:mod:`.location`)."""

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
    new_batch_id,
    parquet_files,
    pending_lake_files,
    read_manifest,
    release_batch,
    remove_batch,
    restore_failed,
    seal,
    set_aside,
)
from pipeline.staging.location import Folder, staging_root, store_outage, table_dir

__all__ = ["FAILED", "FAILURE", "MANIFEST", "PREFIX", "RUNNING", "LakeFile", "Manifest", "StagedBatch",
           "Folder",
           "abandoned_batches", "batch_dir", "claim_batch", "clean_stale", "complete_batches",
           "failed_batches",
           "is_complete", "new_batch_id", "parquet_files", "pending_lake_files", "read_manifest",
           "release_batch", "remove_batch", "restore_failed", "seal", "set_aside", "staging_root",
           "store_outage", "table_dir"]
