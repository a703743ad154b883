"""Postgres connection strings: parse once, print masked, render for each client.

Accepts both forms libpq accepts (``postgresql://user:pw@host:5432/db`` and
``host=… dbname=…``) and renders them for psycopg, JDBC (Spark), SQLAlchemy (dlt) and a
DuckDB ``postgres`` secret. The password lives in a :class:`Secret` and is only revealed
when a client actually connects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pipeline.errors import MASK, ConfigError, scrub_secrets
from pipeline.settings.secret import Secret

_JDBC_PASSTHROUGH = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout")


@dataclass(frozen=True)
class PgDsn:
    """A parsed Postgres connection target; ``password`` is never printed."""

    params: dict[str, str]
    password: Secret = field(default_factory=lambda: Secret(""))

    @classmethod
    def parse(cls, text: str, what: str = "Postgres DSN") -> PgDsn:
        text = (text or "").strip()
        if not text:
            raise ConfigError(f"{what} is empty.", "Set it to postgresql://user@host:5432/db.")
        try:
            params = {k: str(v) for k, v in conninfo_to_dict(text).items()}
        except Exception as exc:  # psycopg.ProgrammingError, quoting the DSN text it choked on
            raise ConfigError(
                f"{what} is not a valid Postgres connection string ({_parser_reason(exc)}); "
                "expected postgresql://user:password@host:5432/dbname or 'host=… dbname=… user=…'.",
                "Percent-encode special characters in the password (@ as %40, : as %3A, / as %2F).",
            ) from None
        password = Secret(params.pop("password", ""))
        return cls(params=params, password=password)

    @property
    def host(self) -> str:
        return self.params.get("host", "localhost")

    @property
    def port(self) -> int:
        try:
            return int(self.params.get("port", "5432"))
        except ValueError:
            raise ConfigError(f"Port {self.params['port']!r} is not a number.") from None

    @property
    def dbname(self) -> str:
        return self.params.get("dbname", self.user)

    @property
    def user(self) -> str:
        return self.params.get("user", "postgres")

    def with_dbname(self, dbname: str) -> PgDsn:
        return PgDsn(params={**self.params, "dbname": dbname}, password=self.password)

    def conninfo(self) -> str:
        """The libpq string with the password, for handing to a client (never to a log)."""
        extra = {"password": self.password.reveal()} if self.password else {}
        return make_conninfo("", **self.params, **extra)

    def params_without_password(self) -> str:
        """libpq ``key=value`` text of every setting but the password (safe to print)."""
        return make_conninfo("", **self.params)

    def masked(self) -> str:
        """A URL safe to print: the password is replaced by ``***``."""
        auth = quote(self.user, safe="")
        if self.password:
            auth += f":{MASK}"
        query = "&".join(
            f"{k}={v}" for k, v in self.params.items() if k not in ("host", "port", "dbname", "user")
        )
        url = f"postgresql://{auth}@{self.host}:{self.port}/{self.dbname}"
        return f"{url}?{query}" if query else url

    def __str__(self) -> str:
        return self.masked()

    def jdbc_url(self) -> str:
        """JDBC URL without credentials (they go in connection properties)."""
        query = "&".join(f"{k}={self.params[k]}" for k in _JDBC_PASSTHROUGH if k in self.params)
        url = f"jdbc:postgresql://{self.host}:{self.port}/{self.dbname}"
        return f"{url}?{query}" if query else url

    def sqlalchemy_url(self) -> str:
        """SQLAlchemy URL for the psycopg 3 driver (used by dlt); contains the password."""
        auth = quote(self.user, safe="")
        if self.password:
            auth += ":" + quote(self.password.reveal(), safe="")
        query = "&".join(f"{k}={self.params[k]}" for k in _JDBC_PASSTHROUGH if k in self.params)
        url = f"postgresql+psycopg://{auth}@{self.host}:{self.port}/{self.dbname}"
        return f"{url}?{query}" if query else url


def _parser_reason(exc: Exception) -> str:
    """The parser's reason without the text it quotes: that fragment may be the password
    (``invalid percent-encoded token: "pa%zzss"``), so every quoted part is masked."""
    reason = scrub_secrets(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    return re.sub(r'"[^"]*"|\'[^\']*\'', f'"{MASK}"', reason)
