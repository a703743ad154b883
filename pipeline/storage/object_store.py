"""The object store's ``S3_*`` settings in each consumer's spelling, from one place (pure).

Three engines reach the same bucket: DuckDB (httpfs, through a ``CREATE SECRET``), pyarrow
(the staging filesystem and the arrow reader's tasks) and Spark's Hadoop S3A (the JDBC reader's
executors). Each option is translated here once, so the three cannot drift apart: the same
endpoint, region, addressing, TLS and credentials (or the provider's credential chain).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.errors import MASK
from pipeline.sqltext import quote_literal

if TYPE_CHECKING:  # a type only: the slice tasks import this through storage.folder
    from pipeline.settings.model import StorageOptions

# DuckDB's secret TYPE for each URI scheme it reads
SECRET_TYPES = {"s3": "s3", "gs": "gcs", "gcs": "gcs", "r2": "r2"}


@dataclass(frozen=True)
class ObjectStore:
    """The ``S3_*`` settings (``S3_ENDPOINT`` is ``host:port`` as DuckDB takes it; no keys: the
    provider's credential chain)."""

    options: StorageOptions

    def _secret(self) -> str:
        secret = self.options.secret
        return secret.reveal() if secret else ""

    def endpoint_url(self) -> str | None:
        """``S3_ENDPOINT`` with a scheme (what Hadoop wants), ``S3_USE_SSL`` choosing it."""
        endpoint = self.options.endpoint
        if not endpoint or "://" in endpoint:
            return endpoint
        return f"{'http' if self.options.use_ssl is False else 'https'}://{endpoint}"

    def duckdb_secret(self, scheme: str, show_secrets: bool) -> list[str]:
        """The options of DuckDB's ``CREATE SECRET`` for ``scheme`` (the secret masked unless
        ``show_secrets``: the same text serves ``--print-attach``)."""
        storage, kind = self.options, SECRET_TYPES[scheme]
        parts = [f"TYPE {kind}"]
        if storage.key_id:
            parts.append(f"KEY_ID {quote_literal(storage.key_id)}")
            parts.append(f"SECRET {quote_literal(self._secret() if show_secrets else MASK)}"
                         if storage.secret else "SECRET ''")
        else:
            parts.append("PROVIDER credential_chain")
        if kind == "r2" and storage.account_id:
            parts.append(f"ACCOUNT_ID {quote_literal(storage.account_id)}")
        if storage.region:
            parts.append(f"REGION {quote_literal(storage.region)}")
        if storage.endpoint:
            parts.append(f"ENDPOINT {quote_literal(storage.endpoint)}")
        if storage.url_style:
            parts.append(f"URL_STYLE {quote_literal(storage.url_style)}")
        if storage.use_ssl is not None:
            parts.append(f"USE_SSL {'true' if storage.use_ssl else 'false'}")
        return parts

    def pyarrow(self) -> dict[str, object]:
        """Keyword arguments of ``pyarrow.fs.S3FileSystem``."""
        storage = self.options
        options: dict[str, object] = {}
        if storage.key_id:
            options.update(access_key=storage.key_id, secret_key=self._secret())
        if storage.region:
            options["region"] = storage.region
        if storage.endpoint:
            options["endpoint_override"] = storage.endpoint
        if storage.use_ssl is not None:
            options["scheme"] = "https" if storage.use_ssl else "http"
        if storage.url_style == "vhost":
            options["force_virtual_addressing"] = True
        return options

    def s3a(self) -> dict[str, str]:
        """Hadoop's ``fs.s3a.*`` properties (Spark's UI redacts the keys: ``spark.redaction.regex``)."""
        storage = self.options
        conf: dict[str, str] = {}
        if storage.key_id:
            conf["fs.s3a.access.key"] = storage.key_id
            conf["fs.s3a.secret.key"] = self._secret()
        if (endpoint := self.endpoint_url()) is not None:
            conf["fs.s3a.endpoint"] = endpoint
        if storage.region:
            conf["fs.s3a.endpoint.region"] = storage.region
        if storage.use_ssl is not None:
            conf["fs.s3a.connection.ssl.enabled"] = "true" if storage.use_ssl else "false"
        if storage.url_style:
            conf["fs.s3a.path.style.access"] = "true" if storage.url_style == "path" else "false"
        return conf
