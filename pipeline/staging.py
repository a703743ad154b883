"""The staging contract: ``STAGING_PATH/<table>/batch_id=<id>/*.parquet`` + ``_manifest.json``.

The manifest is written last (atomically, by rename): a folder without one is an
incomplete batch and is never promoted.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pipeline.source.window import Window, iso, parse_iso

MANIFEST = "_manifest.json"
PREFIX = "batch_id="


def new_batch_id(now: datetime | None = None) -> str:
    """Sortable by creation time, unique across processes: ``20261121T200102123456Z-1a2b3c4d``."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{now:%Y%m%dT%H%M%S%fZ}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Manifest:
    """What a complete staged batch holds."""

    batch_id: str
    table: str
    engine: str
    window_low: str | None
    window_upper: str
    row_count: int
    files: list[str]
    schema: list[dict[str, str]]
    extract_seconds: float
    created_at: str = field(default_factory=lambda: iso(datetime.now(UTC)))

    @property
    def window(self) -> Window:
        return Window(low=parse_iso(self.window_low), upper=parse_iso(self.window_upper))


@dataclass(frozen=True)
class StagedBatch:
    path: Path
    manifest: Manifest

    @property
    def batch_id(self) -> str:
        return self.manifest.batch_id

    def file_paths(self) -> list[str]:
        return [str(self.path / name) for name in self.manifest.files]


def batch_dir(table_dir: Path, batch_id: str) -> Path:
    return table_dir / f"{PREFIX}{batch_id}"


def parquet_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.parquet"))


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Write ``_manifest.json`` atomically; from this moment the batch is complete."""
    tmp = path / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(asdict(manifest), indent=2))
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path / MANIFEST)


def read_manifest(path: Path) -> Manifest | None:
    try:
        data = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    return Manifest(**data)


def complete_batches(table_dir: Path) -> list[StagedBatch]:
    """Complete batches, oldest first (batch ids sort by creation time)."""
    found = []
    for path in sorted(table_dir.glob(f"{PREFIX}*")):
        manifest = read_manifest(path)
        if manifest is not None:
            found.append(StagedBatch(path=path, manifest=manifest))
    return found


def remove_batch(path: Path) -> None:
    """Delete a batch folder; the manifest goes first so a half-deleted batch is incomplete."""
    (path / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


def clean_stale(table_dir: Path, older_than_seconds: float = 3600.0) -> list[Path]:
    """Remove incomplete batches (no manifest) untouched for ``older_than_seconds``.

    A younger incomplete batch may belong to an extraction that is still running in
    another process, so it is left alone.
    """
    removed = []
    cutoff = time.time() - older_than_seconds
    for path in table_dir.glob(f"{PREFIX}*"):
        if (path / MANIFEST).exists():
            continue
        newest = max((p.stat().st_mtime for p in path.rglob("*")), default=path.stat().st_mtime)
        if newest < cutoff:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
