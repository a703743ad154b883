"""Is the lake's data folder still what its catalog says: every registered file present with the
size the catalog recorded, and the folder's marker this lake's?

A file overwritten, truncated or deleted behind the lake's back fails every query that reads
it, but nothing notices until someone runs ``--verify``; so ``--status`` asks this on every
call. One listing of the data folder (no file is opened): sizes are what the catalog wrote at
registration, and a Parquet file that changed almost never keeps its size.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from pipeline import actions
from pipeline.errors import ConfigError
from pipeline.lake.identity import lake_id, table_names
from pipeline.lake.ownership import MARKER, read_claim
from pipeline.lake.session import Lake
from pipeline.sqltext import quote_literal
from pipeline.storage.folder import Folder, split_uri

SHOWN = 3  # damaged files named in a message; the count says how many more


@dataclass(frozen=True)
class Integrity:
    """Registered files checked, those that no longer match, and what is wrong with the marker."""

    files_checked: int
    damaged: list[str]
    marker_problem: str | None = None

    @property
    def problems(self) -> list[str]:
        found = []
        if self.damaged:
            shown = "; ".join(self.damaged[:SHOWN])
            more = f" and {len(self.damaged) - SHOWN} more" if len(self.damaged) > SHOWN else ""
            found.append(f"{len(self.damaged)} data file(s) the catalog lists no longer match it "
                         f"({shown}{more}): a query that reads them fails. Restore them from a backup, or "
                         f"read the lake at a snapshot before they changed ({actions.AT_VERSION})")
        if self.marker_problem:
            found.append(self.marker_problem)
        return found

    def as_dict(self) -> dict[str, object]:
        return {"files_checked": self.files_checked, "damaged_files": self.damaged,
                "marker_problem": self.marker_problem}


def registered_files(lake: Lake,
                     tables: set[tuple[str, str]]) -> dict[str, int]:
    """Every data and delete file of ``tables`` in the current snapshot: path and recorded size."""
    files: dict[str, int] = {}
    name = quote_literal(lake.name)
    for schema, table in tables:
        rows = lake.execute(
            f"SELECT data_file, data_file_size_bytes, delete_file, delete_file_size_bytes "
            f"FROM ducklake_list_files({name}, {quote_literal(table)}, schema => {quote_literal(schema)})"
        ).fetchall()
        for data, data_size, delete, delete_size in rows:
            files[data] = int(data_size)
            if delete:
                files[delete] = int(delete_size)
    return files


def present_files(folder: Folder) -> dict[str, int]:
    """Every file below ``folder`` and its size, by path in the folder's filesystem."""
    return {info.path: int(info.size) for info in folder.files_below()}


def damaged(registered: dict[str, int], present: dict[str, int], root: str) -> list[str]:
    """Registered files missing or of another size than recorded (pure), named relative to ``root``."""
    found = []
    for uri, size in sorted(registered.items()):
        path = split_uri(uri)[1]
        name = posixpath.relpath(path, root) if path.startswith(root) else uri
        actual = present.get(path)
        if actual is None:
            found.append(f"{name} is missing")
        elif actual != size:
            found.append(f"{name} is {actual} bytes, registered as {size}")
    return found


def check(lake: Lake,
          tables: set[tuple[str, str]] | None = None) -> Integrity:
    """``tables``: the lake's tables when the caller has read them already."""
    tables = table_names(lake) if tables is None else tables
    folder = lake.data_folder
    registered = registered_files(lake, tables)
    broken = damaged(registered, present_files(folder), folder.path.rstrip("/") + "/")
    # no identity yet, no marker yet
    identified = (lake.ops_schema, "lake_identity") in tables
    return Integrity(len(registered), broken, _marker_problem(lake, folder) if identified else None)


def _marker_problem(lake: Lake, folder: Folder) -> str | None:
    try:
        claim = read_claim(folder)
    except (ConfigError, OSError) as exc:  # an unreadable marker is the finding, not a crash of --status
        return str(exc).splitlines()[0]
    if claim is None:
        return None  # a lake from before markers, or one whose marker is written by its next run
    identity = lake_id(lake)
    if claim.lake_id != identity:
        return (f"the data folder's marker {folder.uri(MARKER)} names another lake ({claim.lake_name}, "
                f"id {claim.lake_id}; this lake is {identity}): every writing command stops until it "
                "is this lake's again. Restore the marker from a backup, or give one of the lakes "
                "another DUCKLAKE_DATA_PATH")
    return None
