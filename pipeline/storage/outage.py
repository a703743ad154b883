"""An object store that cannot be reached, named as such, whichever engine met it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.errors import StorageUnavailable, first_line, scrub_secrets
from pipeline.storage.folder import is_object_store, split_uri

if TYPE_CHECKING:
    from pipeline.settings import Settings


# what an object store that went away looks like, through pyarrow, DuckDB's httpfs or Hadoop's S3A
_STORE_DOWN = ("could not connect", "connection refused", "curlcode: 7", "unable to connect",
               "connect timed out", "connection reset", "timed out", "unable to execute http request",
               "failed to connect")
# and that it is the store's: a refused Postgres connection says none of these
_STORE_WORDS = ("s3", "http", "aws", "curl", "object", "bucket")


def store_outage(settings: Settings, exc: BaseException) -> StorageUnavailable | None:
    """When ``exc`` says an object store holding ``STAGING_PATH`` or ``DUCKLAKE_DATA_PATH`` cannot
    be reached: the error naming the store and the key, temporary; else None."""
    text = scrub_secrets(str(exc))
    lowered = text.lower()
    if not (any(m in lowered for m in _STORE_DOWN) and any(w in lowered for w in _STORE_WORDS)):
        return None
    candidates = (("STAGING_PATH", settings.staging_path), ("DUCKLAKE_DATA_PATH", settings.data_path or ""))
    stores = [(key, path) for key, path in candidates if is_object_store(path)]
    if not stores:
        return None
    # the one the error names (its bucket and prefix, in any spelling), else staging
    key, path = next(((k, p) for k, p in stores if split_uri(p)[1] in text), stores[0])
    endpoint = f" at S3_ENDPOINT={settings.storage.endpoint}" if settings.storage.endpoint else ""
    return StorageUnavailable(f"Cannot reach the object store{endpoint} holding {key}={path} "
                              f"({first_line(text)}).", "Check that the store is up and reachable; nothing "
                              "was promoted that is not complete, and the next run carries on from here.")
