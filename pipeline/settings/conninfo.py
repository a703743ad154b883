"""libpq's ``key=value`` connection strings, read and written as libpq does without importing psycopg
(a tenth of a second at every start, most of what a read-only ``--sql`` session's start spent
beyond a bare DuckDB attach). Only what this module reads exactly as libpq does is read here: a
URL, an unknown keyword or anything malformed returns None, and the caller asks libpq (through
psycopg) — so the answer, or the error, is libpq's. tests/unit/settings/test_conninfo.py compares
both on every shape, and :data:`KEYWORDS` with the libpq psycopg carries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# libpq 18's connection keywords, in its own order (PQconninfoParse returns them in this order)
KEYWORDS = (
    "service", "user", "password", "passfile", "channel_binding", "connect_timeout", "dbname", "host",
    "hostaddr", "port", "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "sslmode", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslcertmode", "sslpassword",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "require_auth", "min_protocol_version",
    "max_protocol_version", "ssl_min_protocol_version", "ssl_max_protocol_version", "gssencmode",
    "krbsrvname", "gsslib", "gssdelegation", "replication", "target_session_attrs", "load_balance_hosts",
    "scram_client_key", "scram_server_key", "oauth_issuer", "oauth_client_id", "oauth_client_secret",
    "oauth_scope", "sslkeylogfile",
)
_ORDER = {keyword: index for index, keyword in enumerate(KEYWORDS)}
_URL = re.compile(r"^postgres(ql)?://")
_ESCAPE = re.compile(r"([\\'])")
_SPACE = re.compile(r"\s")
_BLANK = frozenset(" \t\n\v\f\r")  # C's isspace, as libpq tests each byte


def parse(text: str) -> dict[str, str] | None:
    """``text``'s settings in libpq's order, as libpq's conninfo parser reads a ``key=value`` string
    (whitespace around ``=``, a value quoted in ``'…'``, a backslash taking the next character
    as it is, the last of a repeated key winning); None for anything else: ask libpq."""
    if _URL.match(text) or "\x00" in text:
        return None
    found: dict[str, str] = {}
    i, end = 0, len(text)
    while True:
        while i < end and text[i] in _BLANK:
            i += 1
        if i == end:
            break
        start = i
        while i < end and text[i] != "=" and text[i] not in _BLANK:
            i += 1
        keyword = text[start:i]
        while i < end and text[i] in _BLANK:
            i += 1
        if i == end or text[i] != "=" or keyword not in _ORDER:
            return None
        i += 1
        while i < end and text[i] in _BLANK:
            i += 1
        value: list[str] = []
        if i < end and text[i] == "'":
            i += 1
            while True:
                if i == end:
                    return None  # an unterminated quote
                if text[i] == "\\" and i + 1 < end:
                    value.append(text[i + 1])
                    i += 2
                elif text[i] == "'":
                    i += 1
                    break
                else:
                    value.append(text[i])
                    i += 1
        else:
            while i < end and text[i] not in _BLANK:
                if text[i] == "\\":  # the next character as it is (none: libpq drops a last backslash)
                    value.append(text[i + 1:i + 2])
                    i = min(i + 2, end)
                else:
                    value.append(text[i])
                    i += 1
        found[keyword] = "".join(value)
    return {keyword: found[keyword] for keyword in sorted(found, key=_ORDER.__getitem__)}


def render(params: Mapping[str, str]) -> str | None:
    """``params`` as one ``key=value`` string, escaped as psycopg's ``make_conninfo`` escapes them (in
    their order); None when a key is not libpq's (ask psycopg, which says so)."""
    if any(key not in _ORDER for key in params):
        return None
    return " ".join(f"{key}={_escaped(str(value))}" for key, value in params.items())


def _escaped(value: str) -> str:
    if not value:
        return "''"
    value = _ESCAPE.sub(r"\\\1", value)
    return f"'{value}'" if _SPACE.search(value) else value
