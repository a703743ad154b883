"""A lake owns its data folder.

DuckLake's catalog says which Parquet files belong to a lake, but nothing in the data folder
says which lake the folder belongs to. Two lakes pointed at one ``DUCKLAKE_DATA_PATH`` (two
``DUCKLAKE_NAME``s in one catalog database, say) then see each other's files as orphans,
and maintenance of one deletes the other's data. So the first run of a lake writes a marker,
``.event-lake.json``, into its data folder (the lake's identity from ``ops.lake_identity``,
its name and catalog, never a credential); every command that writes checks it before it
touches a file, and orphan cleanup never deletes a file below another lake's marker.

Lakes made before the marker get one on their next writing command: no migration step.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.errors import ConfigError
from pipeline.lake.identity import lake_id, table_names
from pipeline.lake.session import Lake
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.resolve import DATA_FOLDER_MARKER as MARKER
from pipeline.sqltext import one_row
from pipeline.storage.folder import Folder, split_uri

# data folders this process has already seen to be its lake's: (data path, lake id)
_claimed: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Claim:
    """What a data folder's marker says."""

    lake_id: str
    lake_name: str
    catalog: str

    @classmethod
    def of(cls, lake_name: str, catalog: CatalogSpec, identity: str) -> Claim:
        return cls(identity, lake_name, catalog.describe())

    @classmethod
    def parse(cls, text: str) -> Claim | None:
        try:
            data = json.loads(text)
            return cls(str(data["lake_id"]), str(data["lake_name"]), str(data["catalog"]))
        except (ValueError, KeyError, TypeError):
            return None

    def render(self) -> str:
        data: dict[str, Any] = {"lake_id": self.lake_id, "lake_name": self.lake_name, "catalog": self.catalog,
                                "claimed_at": datetime.now(UTC).isoformat(timespec="seconds"),
                                "note": "This folder holds the Parquet files of one DuckLake; another lake "
                                        "must not use it as its DUCKLAKE_DATA_PATH."}
        return json.dumps(data, indent=2) + "\n"


class DataFolderClaimed(ConfigError):
    """The data folder belongs to another lake: nothing was touched."""


def read_claim(folder: Folder) -> Claim | None:
    text = folder.read_text(MARKER)
    if text is None:
        return None
    claim = Claim.parse(text)
    if claim is None:
        raise ConfigError(f"The data folder's marker {folder.uri(MARKER)} is not readable JSON.",
                          "It names the lake that owns the folder; restore it from a backup, or delete "
                          "it if only this lake ever used the folder (the next run writes it again).")
    return claim


def _refuse(data_path: str, lake_name: str, catalog: CatalogSpec, claim: Claim) -> DataFolderClaimed:
    same_name = claim.lake_name == lake_name and claim.catalog == catalog.describe()
    whose = ("an earlier lake of the same name and catalog (the catalog was recreated since; its files "
             "are not in this catalog)" if same_name else
             f"the lake {claim.lake_name} (catalog {claim.catalog})")
    return DataFolderClaimed(
        f"DUCKLAKE_DATA_PATH={data_path} belongs to {whose}; lake {lake_name} "
        f"(catalog {catalog.describe()}) stopped before touching it.",
        "Give each lake a data folder of its own (set DUCKLAKE_DATA_PATH), or point DUCKLAKE_CATALOG and "
        "DUCKLAKE_NAME at the lake that owns this folder.")


def claim(lake: Lake) -> None:
    """Make sure the data folder is this lake's: claim it if unclaimed, stop if another lake's.

    A lake without its ops tables yet (an ad-hoc ``--sql --write`` on a new lake) has no
    identity to claim with: it may use an unclaimed folder but never a claimed one.
    """
    has_identity = (lake.ops_schema, "lake_identity") in table_names(lake)
    identity = lake_id(lake) if has_identity else None
    if identity is not None and (lake.data_path, identity) in _claimed:
        return
    folder = lake.data_folder
    found = read_claim(folder)
    if found is None and identity is not None:
        _refuse_if_not_empty(lake, folder)
        found = _write_once(folder, Claim.of(lake.name, lake.catalog, identity))
    if found is not None and found.lake_id != identity:
        raise _refuse(lake.data_path, lake.name, lake.catalog, found)
    if identity is not None:
        _claimed.add((lake.data_path, identity))


def catalog_holds_lake(catalog: CatalogSpec, lake_name: str) -> bool:
    """Has ``catalog`` the lake already (asked without attaching: DuckLake's ATTACH creates it)?"""
    if catalog.pg is None:
        return catalog.path is not None and catalog.path.exists()
    import psycopg

    with psycopg.connect(catalog.pg.conninfo(), connect_timeout=10) as conn:
        query = "SELECT to_regclass(format('%%I.ducklake_metadata', %s::text)) IS NOT NULL"
        return one_row(conn.execute(query, (lake_name,)))[0]


def refuse_before_creating(catalog: CatalogSpec, lake_name: str, data_path: str, data: Folder) -> None:
    """A lake not in its catalog yet is created by its first ATTACH, which also records its data
    path (``data_path``, the folder ``data``) there: on a folder another lake's marker claims, stop
    before that, so nothing is left in the catalog bound to someone else's folder."""
    found = read_claim(data)
    if found is not None and not catalog_holds_lake(catalog, lake_name):
        raise _refuse(data_path, lake_name, catalog, found)


def _refuse_if_not_empty(lake: Lake, folder: Folder) -> None:
    """A lake claims only a new or empty folder, or one holding only files named as a lake writes
    them (its own, from before markers existed): its maintenance deletes files its catalog never
    listed, so a user's own files must never end up below its data path."""
    ignored = (".write-check-", f".{MARKER}")  # the preflight's probes, a marker being written
    others = [info.path for info in folder.files_below()
              if not written_by_a_lake(info.path) and not info.base_name.startswith(ignored)]
    if not others:
        return
    shown = ", ".join(posixpath.relpath(p, folder.path) for p in sorted(others)[:3])
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    raise ConfigError(
        f"DUCKLAKE_DATA_PATH={lake.data_path} already holds files this lake did not write "
        f"({shown}{more}), and no lake's marker ({MARKER}) claims it. Lake {lake.name} claims "
        "only a new or empty folder: its maintenance deletes files there that its catalog never listed. "
        "Nothing was written.",
        "Point DUCKLAKE_DATA_PATH at a new or empty folder of the lake's own (or move those files out).")


def _write_once(folder: Folder, mine: Claim) -> Claim:
    """Write the marker unless one appeared meanwhile; returns the marker that holds."""
    folder.make(exist_ok=True)
    if folder.is_local:
        # create-if-absent, atomically: the whole file is written aside, then linked into place
        # (link fails when the name exists), so two first runs cannot both claim the folder
        tmp = folder.uri(f".{MARKER}.{os.getpid()}.tmp")
        with open(tmp, "w") as handle:
            handle.write(mine.render())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, folder.uri(MARKER))
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    else:  # object storage has no create-if-absent here: write, then read back who won
        folder.write_text(MARKER, mine.render())
    return read_claim(folder) or mine


def foreign_markers(folder: Folder) -> list[str]:
    """Folders (as URIs, with a trailing ``/``) below ``folder`` that another lake's marker claims."""
    own = posixpath.join(folder.path, MARKER)
    found = [posixpath.dirname(i.path) for i in folder.files_below()
             if i.base_name == MARKER and i.path != own]
    scheme = folder.scheme
    return [(f"{scheme}://{path}" if scheme else path).rstrip("/") + "/" for path in found]


def own_table_folders(lake: Lake) -> list[str]:
    """Every folder the lake's catalog ever put a table's files in (dropped tables included)."""
    metadata = lake.metadata()
    rows = lake.execute(
        f"SELECT s.path, s.path_is_relative, t.path, t.path_is_relative FROM {metadata}.ducklake_table t "
        f"JOIN {metadata}.ducklake_schema s USING (schema_id)").fetchall()
    root = lake.data_path if lake.data_path.endswith("/") else lake.data_path + "/"
    folders = set()
    for schema_path, schema_relative, table_path, table_relative in rows:
        schema_dir = root + schema_path if schema_relative else schema_path
        folder = schema_dir + table_path if table_relative else table_path
        folders.add(folder if folder.endswith("/") else folder + "/")
    return sorted(folders)


# the names this lake gives the files it writes in its table folders: DuckLake's own data and
# delete files, and zero-copy's (<batch id>-<n>.parquet, <batch id>-lake-ids.parquet, and Spark's
# output under _incoming/<batch id>/); a file named otherwise is someone else's, never an orphan
_BATCH_ID = r"\d{8}T\d{12}Z-[0-9a-f]{8}"
LAKE_FILE_NAMES = re.compile(rf"(?:^|/)(?:ducklake-[0-9a-f-]+(?:-delete)?\.parquet"
                             rf"|{_BATCH_ID}-(?:\d{{5}}|lake-ids)\.parquet|_incoming/{_BATCH_ID}/.+)$")


def written_by_a_lake(uri: str) -> bool:
    """Is ``uri`` named as this lake writes its files (pure)?"""
    return LAKE_FILE_NAMES.search(uri) is not None


def deletable_orphans(candidates: list[str], own_folders: list[str], foreign: list[str]) -> list[str]:
    """The orphans this lake may delete: named as the lake writes its files, below one of its own
    table folders, and below no folder another lake's marker claims. Pure; paths compare in one
    spelling (``split_uri``)."""
    def norm(uri: str) -> str:
        scheme, path = split_uri(uri)
        return f"{scheme}:{path}"

    own = [norm(f) + "/" for f in own_folders]
    others = [norm(f) + "/" for f in foreign]
    return [c for c in candidates if written_by_a_lake(c)
            and any(norm(c).startswith(o) for o in own) and not any(norm(c).startswith(f) for f in others)]
