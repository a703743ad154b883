"""Postgres connection strings: parse once, print masked, render for each client.

Accepts both forms libpq accepts (``postgresql://user:pw@host:5432/db`` and
``host=… dbname=…``) and renders them for psycopg, JDBC (Spark), SQLAlchemy (dlt) and a
DuckDB ``postgres`` secret. The password lives in a :class:`Secret` and is only revealed
when a client actually connects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from pipeline.errors import MASK, ConfigError, scrub_secrets
from pipeline.settings import conninfo as libpq_text
from pipeline.settings.secret import Secret

_JDBC_PASSTHROUGH = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout")


def _libpq_parse(text: str) -> dict[str, str]:
    """libpq's own reading of ``text`` (what :mod:`.conninfo` leaves to it: URLs, errors)."""
    from psycopg.conninfo import conninfo_to_dict  # psycopg's import is a tenth of a second

    return {k: str(v) for k, v in conninfo_to_dict(text).items()}


def _rendered(params: dict[str, str]) -> str:
    """``params`` as a libpq string (:mod:`.conninfo`; psycopg's make_conninfo for what it declines)."""
    text = libpq_text.render(params)
    if text is None:
        from psycopg.conninfo import make_conninfo

        text = make_conninfo("", **params)
    return text


@dataclass(frozen=True)
class PgDsn:
    """A parsed Postgres connection target; ``password`` is never printed."""

    params: dict[str, str]
    password: Secret = field(default_factory=lambda: Secret(""))
    # SOURCE_TIMEZONE: every session this DSN opens runs in it (None: the server's default)
    timezone: str | None = None

    @classmethod
    def parse(cls, text: str, what: str = "Postgres DSN") -> PgDsn:
        """Parse ``text`` (named ``what`` in errors: the key or flag that held it).

        The password is taken out here, before libpq's parser sees the text: that parser quotes
        the fragment it chokes on, and an unencoded ``/`` or ``@`` in a URL password makes it
        read the password as a port ("Port 'Hunter2' is not a number"). So a URL's user
        information is split at its last ``@`` by hand, the password kept apart, and only the
        password-free rest handed to libpq; every error shows the DSN with the whole password
        replaced by ``***``."""
        text = (text or "").strip()
        if not text:
            raise ConfigError(f"{what} is empty.", "Set it to postgresql://user@host:5432/db.")
        shown = mask_dsn_text(text)
        if _URL.match(text):
            rest, password = _split_url_password(text)
            if password is not None and _BAD_PERCENT.search(password):
                raise ConfigError(f"{what} {shown!r} has a password with an invalid percent-encoding (% must "
                                  "be followed by two hex digits).",
                                  "Percent-encode special characters in the password (% as %25, @ as %40, "
                                  ": as %3A, / as %2F).")
            password = unquote(password) if password is not None else None
        elif "=" in text:
            rest, password = text, None
        else:
            raise ConfigError(f"{what} {shown!r} is not a Postgres connection string: expected "
                              "postgresql://user:password@host:5432/dbname or 'host=… dbname=… user=…'.",
                              f"Fix {what}.")
        try:
            params = libpq_text.parse(rest) or _libpq_parse(rest)
        except Exception as exc:  # noqa: BLE001  psycopg.ProgrammingError, quoting the text it choked on
            raise ConfigError(
                f"{what} {shown!r} is not a valid Postgres connection string ({_parser_reason(exc)}); "
                "expected postgresql://user:password@host:5432/dbname or 'host=… dbname=… user=…'.",
                "Percent-encode special characters in a URL (@ as %40, : as %3A, / as %2F, space as %20); "
                "in key=value form quote a value with spaces as password='a b'.",
            ) from None
        if password is not None:
            params["password"] = password
        for port in filter(None, params.get("port", "").split(",")):
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f"{what} {shown!r} has port {port!r}, which is not a port number.",
                                  "Write the port as digits (5432); percent-encode / and @ in the password.")
        return cls(params=params, password=Secret(params.pop("password", "")))

    @property
    def host(self) -> str:
        return self.params.get("host", "localhost")

    @property
    def port(self) -> int:
        return int(self.params.get("port", "5432").split(",")[0] or 5432)

    @property
    def dbname(self) -> str:
        return self.params.get("dbname", self.user)

    @property
    def user(self) -> str:
        return self.params.get("user", "postgres")

    def with_dbname(self, dbname: str) -> PgDsn:
        return PgDsn(params={**self.params, "dbname": dbname}, password=self.password, timezone=self.timezone)

    def with_timezone(self, timezone: str | None) -> PgDsn:
        return PgDsn(params=self.params, password=self.password, timezone=timezone)

    def session_options(self) -> str | None:
        """libpq ``options`` for a session: the DSN's own, plus the time zone when one is set."""
        options = self.params.get("options", "")
        if self.timezone:
            options = f"{options} -c TimeZone={self.timezone}".strip()
        return options or None

    def conninfo(self) -> str:
        """The libpq string with the password, for handing to a client (never to a log)."""
        extra = {"password": self.password.reveal()} if self.password else {}
        options = self.session_options()
        return _rendered({**self.params, **({"options": options} if options else {}), **extra})

    def params_without_password(self) -> str:
        """libpq ``key=value`` text of every setting but the password (safe to print)."""
        return _rendered(self.params)

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


_URL = re.compile(r"^postgres(?:ql)?://", re.I)
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# a password's value runs to the next ``key=``: an unquoted space in it (a malformed DSN) must not
# leave its second half readable
_KV_PASSWORD = re.compile(r"""(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*(?:\s+(?![A-Za-z_]\w*\s*=)\S+)*)""",
                          re.I)


def _split_url_password(url: str) -> tuple[str, str | None]:
    """``postgresql://u:p/w@h/db`` -> (``postgresql://u@h/db``, ``"p/w"``): the user information
    ends at the last ``@`` before the host (a password may hold unencoded ``/``, ``@``, ``:``).
    The password is returned as written (still percent-encoded)."""
    scheme, _, rest = url.partition("://")
    if "@" not in rest:
        return url, None
    userinfo, _, hostpart = rest.rpartition("@")
    user, colon, password = userinfo.partition(":")
    rest = f"{scheme}://{user}@{hostpart}" if user else f"{scheme}://{hostpart}"
    return rest, (password if colon else None)


def mask_dsn_text(text: str) -> str:
    """``text`` with its password, however malformed, replaced by ``***`` (the rest readable)."""
    if _URL.match(text):
        scheme, _, rest = text.partition("://")
        if "@" not in rest:
            return text
        userinfo, _, hostpart = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        return f"{scheme}://{user}{':' + MASK if colon else ''}@{hostpart}"
    return _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, text)


def _parser_reason(exc: Exception) -> str:
    """The parser's reason without the text it quotes: that fragment may be the password
    (``invalid percent-encoded token: "pa%zzss"``), so every quoted part is masked."""
    reason = scrub_secrets(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    return re.sub(r'"[^"]*"|\'[^\']*\'', f'"{MASK}"', reason)
