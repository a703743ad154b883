"""A group's policy: a plan's batches (one per table, staged in their tables' folders) promoted
together when every one is complete, left alone while a process still extracts them, kept whole
aside when one cannot be promoted, dropped when one was lost in a crash (the next plan reads
their rows again); and what a service lost during promotion is called."""

from __future__ import annotations

import logging

import duckdb

from pipeline import actions, staging
from pipeline.errors import CatalogUnavailable, PipelineError, first_line, is_transient, scrub_secrets
from pipeline.lake.session import Lake
from pipeline.promote import zero_copy
from pipeline.promote.promotion import PromotionResult, promote_together
from pipeline.settings import ResolvedSettings
from pipeline.storage.outage import store_outage

log = logging.getLogger(__name__)


def promote_staged_group(settings: ResolvedSettings, lake: Lake, group: str,
                         members: dict[str, str]) -> tuple[list[tuple[str, PromotionResult]], list[str]]:
    """A SOURCE_TABLES plan's batches (table -> batch id), staged in their tables' folders:
    promoted together when every one is complete; left alone while a process still extracts them;
    dropped when one never completed (the next plan reads their rows again: no table's watermark
    moved). Returns the results by table, and the batches set aside (all of the group's, kept
    whole, when the group cannot be promoted)."""
    root = staging.staging_root(settings)
    found = {table: staging.batch_dir(root.child(table), batch_id) for table, batch_id in members.items()}
    complete = {table: folder for table, folder in found.items() if staging.is_complete(folder)}
    if not complete:  # settled by another process meanwhile
        return [], []
    if len(complete) < len(found):
        if any(root.child(table).child(staging.RUNNING).exists(f"{group}.json") for table in members):
            return [], []  # a process is still extracting the group: it promotes it
        missing = set(found) - set(complete)
        if any(staging.is_set_aside(root.child(table), members[table]) for table in missing):
            # a batch of the group is set aside (a --retry-failed of one table restored this one): the
            # group is kept whole there, together, until its cause is fixed
            for table, folder in complete.items():
                manifest = staging.read_manifest(folder)
                if manifest is not None:
                    staging.set_aside(root.child(table), staging.StagedBatch(folder, manifest),
                                      f"its group {group} has a batch set aside; kept with it")
            return [], []
        for table, folder in complete.items():
            log.warning("dropping staged batch %s of %s: its group %s lost %s's batch in a crash; the "
                        "next load reads those rows again", members[table], table, group,
                        ", ".join(sorted(set(found) - set(complete))))
            manifest = staging.read_manifest(folder)
            staging.remove_batch(folder)  # the manifest first: a crash here leaves it incomplete
            if manifest is not None and manifest.lake_files:  # zero-copy files it would have registered
                zero_copy.remove_files(manifest.lake_files, lake.table_named(table).table_folder)
        return [], []
    staged = [(lake.table_named(table, manifest.id_column, manifest.time_column),
               staging.StagedBatch(folder, manifest))
              for table, folder in complete.items() if (manifest := staging.read_manifest(folder))]
    log.info("promoting group %s (%s)", group,
             ", ".join(f"{member.name} {batch.manifest.row_count} rows" for member, batch in staged))
    try:
        results = promote_together(group, staged, [table.name for table in settings.tables])
    except duckdb.Error as exc:
        if is_transient(exc):  # the catalog or object store is away: the batches are fine, retry later
            raise promotion_outage(settings, exc) from None
        for member, batch in staged:  # all or none: every batch of the group is kept whole
            staging.set_aside(root.child(member.name), batch, first_line(exc))
        log.error("group %s cannot be promoted (%s); its batches are set aside, kept whole, so later "
                  "batches load. Fix the cause, then run: %s", group, first_line(exc),
                  actions.RETRY_FAILED.command())
        return [], [batch.batch_id for _, batch in staged]
    return [(member.name, result) for (member, _), result in zip(staged, results, strict=True)], []


def promotion_outage(settings: ResolvedSettings, exc: duckdb.Error) -> PipelineError:
    """A service promotion needs went away: the object store holding staged batches or the data
    path, else the catalog; temporary, and named."""
    store = store_outage(settings, exc)
    if store is not None:
        return store
    return CatalogUnavailable(f"Lost the lake catalog (DUCKLAKE_CATALOG={settings.catalog.describe()}) "
                              f"during promotion ({first_line(scrub_secrets(str(exc)))}).",
                              "Check that the catalog database runs; nothing was committed, the batch stays "
                              "staged and the next run promotes it.")
