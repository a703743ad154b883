"""Build :class:`Settings` once from the environment, ``.env`` and command-line flags.

Flags win over the environment, which wins over the defaults in :mod:`keys`. Every value is
parsed here, so a malformed one fails at start with the key (or flag) that held it.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Unpack, cast

from pipeline import actions
from pipeline.errors import ConfigError
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.durations import parse_duration
from pipeline.settings.keys import ENV_KEYS
from pipeline.settings.model import (
    DEFAULT_ID_COLUMN,
    DEFAULT_TIME_COLUMN,
    PAYLOAD_KEY,
    Intervals,
    Promotion,
    Reader,
    SchemaChanges,
    SettingsFields,
    SettingsKeywords,
    SparkOptions,
    StagingWriter,
    StorageOptions,
    SubjectKey,
    TableSpec,
)
from pipeline.settings.pgdsn import PgDsn
from pipeline.settings.platform import default_home, user_cache
from pipeline.settings.secret import Secret

log = logging.getLogger(__name__)
EMBEDDED = "embedded"  # DUCKLAKE_CATALOG=embedded: the embedded catalog, on purpose
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

# env key -> (flag name, value); the flag name is what an error message shows
Flags = Mapping[str, tuple[str, str | None]]


class _Reader:
    """Reads declared keys only: a key missing from ENV_KEYS is a bug, not a setting."""

    def __init__(self, env: Mapping[str, str], flags: Flags) -> None:
        self.env, self.flags = env, flags

    def _flag(self, key: str) -> tuple[str, str] | None:
        """(flag name, value) when a flag with a value was given for ``key``."""
        flag = self.flags.get(key)
        return (flag[0], str(flag[1]).strip()) if flag is not None and flag[1] not in (None, "") else None

    def raw(self, key: str) -> str | None:
        if key not in ENV_KEYS:
            raise KeyError(f"{key} is read but not declared in pipeline/settings/keys.py")
        flag = self._flag(key)
        if flag:
            return flag[1]
        given = (self.env.get(key) or "").strip() or None
        file_key = f"{key}_FILE"  # a secret mounted as a file (Docker, Kubernetes) instead
        path = (self.env.get(file_key) or "").strip() if file_key in ENV_KEYS else ""
        if not path:
            return given
        if given is not None:
            raise ConfigError(f"{key} and {file_key} are both set.",
                              f"Set one of them: {file_key} names a file holding the value.")
        return _secret_file(path, file_key, key)

    def name(self, key: str) -> str:
        """What to call the setting in an error: the flag when one was given, else the key."""
        flag = self._flag(key)
        return flag[0] if flag else key

    def value(self, key: str) -> str:
        text = self.raw(key) or ENV_KEYS[key].default
        assert text is not None, f"{key} has no default"
        return text

    def duration(self, key: str):
        return parse_duration(self.value(key), self.name(key))

    def boolean(self, key: str) -> bool | None:
        text = self.raw(key)
        if text is None:
            default = ENV_KEYS[key].default
            return None if default is None else default in _TRUE
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ConfigError(f"{self.name(key)} {text!r} is not true or false.", "Write true or false.")


def _secret_file(path: str, file_key: str, key: str) -> str:
    """The value a ``*_FILE`` key's file holds (a trailing newline dropped); errors name the key and
    the path, never what the file holds."""
    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        raise ConfigError(f"{file_key} {path!r}: no such file.",
                          f"Mount the secret there, or set {key} instead.") from None
    except OSError as exc:
        raise ConfigError(f"{file_key} {path!r} cannot be read ({exc.strerror}).",
                          "Let the user the pipeline runs as read it (e.g. chmod 0400, owned by that "
                          "user).") from None
    if not text:
        raise ConfigError(f"{file_key} {path!r} is empty.",
                          f"Write {key}'s value into it, or unset {file_key}.")
    return text


DEFAULT_LOAD_TIMEOUT = timedelta(hours=1)


def _load_timeout(read: _Reader) -> timedelta:
    """LOAD_TIMEOUT, else an hour or the load interval when longer (a daily load may take hours)."""
    if read.raw("LOAD_TIMEOUT") is not None:
        return read.duration("LOAD_TIMEOUT")
    return max(DEFAULT_LOAD_TIMEOUT, read.duration("LOAD_EVERY"))


def _source_retention(read: _Reader) -> timedelta:
    """SOURCE_RETENTION: zero (the source keeps every row), or at least the look-back, which every
    load reads again and so needs whole in the source."""
    retention, lookback = read.duration("SOURCE_RETENTION"), read.duration("LOOKBACK")
    if retention and retention < lookback:
        raise ConfigError(
            f"{read.name('SOURCE_RETENTION')}={read.value('SOURCE_RETENTION')} is shorter than "
            f"{read.name('LOOKBACK')}={read.value('LOOKBACK')}: every load reads the look-back again, so the "
            "source must keep at least that.",
            "Set SOURCE_RETENTION to how long the source really keeps its rows (longer than LOOKBACK), "
            "or 0 when it keeps them all.")
    return retention


@dataclass(frozen=True, kw_only=True, init=False)
class Settings(SettingsFields):
    """Everything a command needs to know. From Python::

        Settings(source_pg_dsn="postgresql://app@db/app", lookback=timedelta(minutes=5))

    takes the environment keys in lower case (:class:`~pipeline.settings.model.SettingsKeywords`: a
    misspelled one is a type error, and at run time a :class:`~pipeline.errors.ConfigError` naming the
    nearest), the rest from their defaults — not from the environment or ``.env``: what a program
    passes is all there is. Commands build it once with :func:`load_settings`."""

    def __init__(self, **values: Unpack[SettingsKeywords]) -> None:
        if "home" in values:  # every field, as load_settings and dataclasses.replace give them
            SettingsFields.__init__(self, **cast("dict[str, Any]", values))
            return
        _fill(self, settings_of(**values))

    @classmethod
    def holding(cls, fields: SettingsFields) -> Settings:
        """The settings holding ``fields`` (what :func:`load_settings` read and checked)."""
        settings = cls.__new__(cls)
        _fill(settings, fields)
        return settings


def _fill(settings: SettingsFields, fields: SettingsFields) -> None:
    names = SettingsFields.__dataclass_fields__
    SettingsFields.__init__(settings, **{name: getattr(fields, name) for name in names})


def load_settings(env: Mapping[str, str] | None = None, *, dotenv: bool = True,
                  flags: Flags | None = None, spark_conf: list[str] | None = None) -> Settings:
    """Settings from ``env`` (default: ``os.environ`` after reading ``./.env``) and ``flags``;
    ``spark_conf`` (``--spark-conf key=value``, repeatable) adds to or overrides SPARK_CONF."""
    if env is None:
        if dotenv:
            dotenv_path = Path.cwd() / ".env"
            refuse_unknown_keys(load_dotenv_strictly(dotenv_path), str(dotenv_path))
        env = os.environ
    refuse_unknown_keys(env, "the environment")
    read = _Reader(env, flags or {})
    _warn_zero(read)

    home = Path(read.raw("EVENT_LAKE_HOME") or default_home()).expanduser().absolute()
    listed = _source_tables(read)
    tables = _with_subject_keys(read, listed or (
        TableSpec(_table_name(read.value("SOURCE_TABLE"), read.name("SOURCE_TABLE"))),))
    lake_name = read.value("DUCKLAKE_NAME")
    if not _IDENT.match(lake_name):
        raise ConfigError(f"{read.name('DUCKLAKE_NAME')} {lake_name!r} is not a valid name.",
                          "Use letters, digits and underscores, starting with a letter.")
    dsn, catalog = read.raw("SOURCE_PG_DSN"), read.raw("DUCKLAKE_CATALOG")
    chosen_embedded = (catalog or "").lower() == EMBEDDED
    catalog = None if chosen_embedded else catalog
    secret = read.raw("S3_SECRET_ACCESS_KEY")
    return Settings.holding(SettingsFields(
        home=home,
        source_dsn=PgDsn.parse(dsn, read.name("SOURCE_PG_DSN")) if dsn else None,
        tables=tables,
        leave_image=bool(read.boolean("LEAVE_IMAGE")),
        catalog=_catalog(catalog, read.raw("DUCKLAKE_CATALOG_READER"), read.name("DUCKLAKE_CATALOG_READER")),
        embedded_catalog_chosen=chosen_embedded,
        data_path=read.raw("DUCKLAKE_DATA_PATH"),
        lake_name=lake_name,
        staging_path=_staging_path(read.raw("STAGING_PATH"), read.name("STAGING_PATH"), home),
        staging_writer=StagingWriter(_one_of(read.value("STAGING_WRITER"), read.name("STAGING_WRITER"),
                                             tuple(StagingWriter))),
        promotion=Promotion(_one_of(read.value("PROMOTION"), read.name("PROMOTION"), tuple(Promotion))),
        schema_changes=_schema_changes(read),
        lookback=read.duration("LOOKBACK"),
        source_retention=_source_retention(read),
        backfill_rows=_whole_number(read.value("BACKFILL_BATCH_ROWS"), read.name("BACKFILL_BATCH_ROWS"),
                                    most=10**12),
        arrival_column=_arrival_column(read.value("SOURCE_ARRIVAL_COLUMN"),
                                       read.name("SOURCE_ARRIVAL_COLUMN")),
        source_timezone=_time_zone(read.raw("SOURCE_TIMEZONE"), read.name("SOURCE_TIMEZONE")),
        spark=SparkOptions(master=read.value("SPARK_MASTER"), remote=read.raw("SPARK_REMOTE"),
                           jdbc_jar=read.raw("SPARK_JDBC_JAR"),
                           driver_memory=read.value("SPARK_DRIVER_MEMORY"),
                           executor_wait=read.duration("SPARK_EXECUTOR_WAIT"),
                           load_timeout=_load_timeout(read),
                           ui=bool(read.boolean("SPARK_UI")), verbose=bool(read.boolean("SPARK_VERBOSE")),
                           conf={**parse_spark_conf((read.raw("SPARK_CONF") or "").split(";"), "SPARK_CONF"),
                                 **parse_spark_conf(spark_conf or [], "--spark-conf")},
                           partitions=_positive_int(read.raw("SPARK_PARTITIONS"),
                                                    read.name("SPARK_PARTITIONS")),
                           reader=Reader(_one_of(read.value("SPARK_READER"), read.name("SPARK_READER"),
                                                 tuple(Reader))),
                           class_archive=_class_archive(read.raw("SPARK_CLASS_ARCHIVE"))),
        storage=StorageOptions(key_id=read.raw("S3_ACCESS_KEY_ID"), secret=Secret(secret) if secret else None,
                               region=read.raw("S3_REGION"), endpoint=read.raw("S3_ENDPOINT"),
                               url_style=read.raw("S3_URL_STYLE"), use_ssl=read.boolean("S3_USE_SSL"),
                               account_id=read.raw("R2_ACCOUNT_ID")),
        intervals=Intervals(load=read.duration("LOAD_EVERY"), follow=read.duration("FOLLOW_EVERY"),
                            expire=read.duration("EXPIRE_EVERY"),
                            compact=read.duration("COMPACT_EVERY"),
                            compact_files=_whole_number(read.value("COMPACT_FILES"),
                                                        read.name("COMPACT_FILES")),
                            retention=read.duration("RETENTION"),
                            reconcile=read.duration("RECONCILE_EVERY"),
                            reconcile_since=None if read.value("RECONCILE_SINCE").lower() == "all"
                            else read.duration("RECONCILE_SINCE")),
        sql_memory=_memory(read.value("SQL_MEMORY"), read.name("SQL_MEMORY")),
        metrics_host=read.value("METRICS_HOST"),
        metrics_port_text=read.value("METRICS_PORT"), metrics_port_name=read.name("METRICS_PORT"),
        metrics_token=Secret(token) if (token := read.raw("METRICS_TOKEN")) else None,
        erasure_key=Secret(erasure) if (erasure := read.raw("ERASURE_KEY")) else None,
        typed_keys=_typed_keys(read.value("TYPED_KEYS"), read.name("TYPED_KEYS")),
    ))


def _typed_keys(text: str, what: str) -> tuple[str, ...] | None:
    """TYPED_KEYS: None for auto, () for none, else the keys named (each a column's name)."""
    if text.strip().lower() == "auto":
        return None
    if text.strip().lower() in ("none", ""):
        return ()
    keys = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    bad = [key for key in keys if not PAYLOAD_KEY.match(key)]
    twins = [key for i, key in enumerate(keys) if key.lower() in {k.lower() for k in keys[:i]}]
    if twins:
        raise ConfigError(f"{what}: {', '.join(map(repr, twins))} differs from another key only in case: "
                          "each key becomes the column details_<key>, and column names ignore case.",
                          f"Name one of them in {what}; the other stays in the JSON.")
    if bad:
        raise ConfigError(f"{what}: {', '.join(map(repr, bad))} cannot be a typed key: a key becomes the "
                          "column details_<key>, so it is letters, digits and _ (not starting with a "
                          "digit, at most 56 characters).",
                          f"Name top-level payload keys, e.g. {what}=user_id,session_id; or {what}=auto.")
    return keys


def _with_subject_keys(read: _Reader, tables: tuple[TableSpec, ...]) -> tuple[TableSpec, ...]:
    """``tables`` with SUBJECT_KEY's keys: ``key`` for every table that names none, or ``table=key``
    pairs (comma-separated) naming tables of the image. A table whose own entry says ``subject=``
    keeps it; SUBJECT_KEY naming another key for it is refused (one table, one key), and so is
    anything that leaves a table's key in doubt: two keys for every table, a table named twice, a
    pair without its table, a schema the table is not read from."""
    text, what = read.raw("SUBJECT_KEY"), read.name("SUBJECT_KEY")
    if not text:
        return tables
    listed = read.name("SOURCE_TABLES")
    by_name = {table.name.lower(): table for table in tables}
    example = f"{what}={tables[0].name}=details.user_id"
    keys: dict[str, SubjectKey] = {}  # the tables SUBJECT_KEY names
    every: SubjectKey | None = None  # a key alone: every table that names none
    for entry in (part.strip() for part in text.split(",") if part.strip()):
        table, equals, key = (part.strip() for part in entry.rpartition("="))
        if not equals:
            if every is not None:
                raise ConfigError(f"{what}: {text!r} gives two keys for every table ({every}, {key}).",
                                  f"Give one key for every table, or table=key pairs, e.g. {example}.")
            every = SubjectKey.parse(key, what)
            continue
        schema, _, name = table.rpartition(".")
        spec = by_name.get(name.lower())
        if not table or spec is None or (schema and schema != spec.schema):
            raise ConfigError(f"{what}: {table!r} is not a table this lake loads "
                              f"({', '.join(t.qualified for t in tables)}).",
                              f"Write table=key pairs for the tables of {listed}, e.g. {example}.")
        if spec.name in keys:
            raise ConfigError(f"{what} names {spec.name}'s key twice ({keys[spec.name]}, {key}).",
                              f"Give each table one key, e.g. {example}.")
        keys[spec.name] = SubjectKey.parse(key, what)
    for spec in tables:
        if spec.subject is not None and spec.name in keys and keys[spec.name] != spec.subject:
            raise ConfigError(f"{what} names {keys[spec.name]} as {spec.name}'s subject, and "
                              f"{listed}' entry for it says subject={spec.subject}.",
                              f"Say it in one place: the table's own subject= in {listed}, or {what}.")
    return tuple(spec if spec.subject is not None else replace(spec, subject=keys.get(spec.name, every))
                 for spec in tables)


_TABLE_OPTIONS = ("time", "id", "subject", "schema_changes")
_TABLES_FORMS = ("schema.table(time=column, id=column, subject=column[.key…], schema_changes=contract) or "
                 "schema.table[:time_column[:id_column]]")


def _table_entries(text: str, what: str) -> list[str]:
    """SOURCE_TABLES split at the commas between its tables (not those inside a table's options)."""
    entries, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ConfigError(f"{what}: {text!r} has unbalanced or nested parentheses.",
                              f"Write each table as {_TABLES_FORMS}, separated by commas.")
        if char == "," and depth == 0:
            entries.append(current.strip())
            current = ""
        else:
            current += char
    if depth:
        raise ConfigError(f"{what}: {text!r} has a '(' that is never closed.",
                          f"Write each table as {_TABLES_FORMS}, separated by commas.")
    return [*entries, current.strip()]


def _table_spec(entry: str, what: str) -> TableSpec:
    """One entry of SOURCE_TABLES, in the keyed form ``schema.table(time=…, id=…, subject=…)`` or the
    positional ``schema.table[:time_column[:id_column]]``."""
    bad = ConfigError(f"{what}: {entry!r} is not {_TABLES_FORMS}.",
                      "Separate tables with commas, e.g. SOURCE_TABLES=public.sessions(time=started_at, "
                      "id=session_id, subject=user_id),public.events; column names are plain identifiers "
                      "(letters, digits, _): a column whose name needs quotes is read through a view that "
                      "renames it.")
    if "(" in entry:
        name, _, rest = entry.partition("(")
        if not rest.endswith(")"):
            raise bad
        options: dict[str, str] = {}
        for option in (part.strip() for part in rest[:-1].split(",") if part.strip()):
            key, equals, value = (part.strip() for part in option.partition("="))
            if key not in _TABLE_OPTIONS or not equals or not value:
                raise ConfigError(f"{what}: {option!r} in {entry!r} is not an option of a table.",
                                  f"A table takes {', '.join(k + '=' for k in _TABLE_OPTIONS)}, e.g. "
                                  "public.sessions(time=started_at, id=session_id).")
            if key in options:
                raise ConfigError(f"{what}: {entry!r} says {key}= twice.", "Give each option once.")
            if key == "schema_changes":
                value = _one_of(value, f"{what} {name.strip()}(schema_changes=)", tuple(SchemaChanges))
            elif key != "subject" and not _IDENT.match(value):
                raise bad
            options[key] = value
        return TableSpec(_table_name(name.strip(), what), options.get("time", DEFAULT_TIME_COLUMN),
                         options.get("id", DEFAULT_ID_COLUMN),
                         SubjectKey.parse(options["subject"], what) if "subject" in options else None,
                         SchemaChanges(options["schema_changes"]) if "schema_changes" in options else None)
    name, *columns = entry.split(":")
    if not entry or len(columns) > 2 or not all(_IDENT.match(c) for c in columns):
        raise bad
    return TableSpec(_table_name(name, what), columns[0] if columns else DEFAULT_TIME_COLUMN,
                     columns[1] if len(columns) > 1 else DEFAULT_ID_COLUMN)


def _source_tables(read: _Reader) -> tuple[TableSpec, ...]:
    """SOURCE_TABLES: comma-separated tables, each keyed (``schema.table(time=…, id=…, subject=…)``)
    or positional (``schema.table[:time_column[:id_column]]``); () when unset."""
    text, what = read.raw("SOURCE_TABLES"), read.name("SOURCE_TABLES")
    if text is None or read.name("SOURCE_TABLE") != "SOURCE_TABLE":
        return ()  # unset, or one table named by a flag (the generator's --table): that table alone
    tables = [_table_spec(entry, what) for entry in _table_entries(text, what)]
    # DuckDB's names ignore case: public.Items and public.items would be one lake table
    lake_tables = [t.name.lower() for t in tables]
    twice = sorted({n for n in lake_tables if lake_tables.count(n) > 1})
    if twice:
        raise ConfigError(f"{what}: two tables would land as main.{twice[0]} in the lake "
                          f"({', '.join(t.qualified for t in tables if t.name.lower() == twice[0])}; the "
                          "lake's names ignore case).",
                          "Each table lands under its own name: load tables of different names, or give "
                          "each its own lake (DUCKLAKE_NAME).")
    single = read.raw("SOURCE_TABLE")
    listed = {t.qualified for t in tables}
    if single is not None and _table_name(single, read.name("SOURCE_TABLE")) not in listed:
        raise ConfigError(f"{read.name('SOURCE_TABLE')} {single!r} and {what} {text!r} are both set, and "
                          f"{what} does not list it.",
                          f"Set one of them: {what} lists every table a run loads.")
    return tuple(tables)


def _schema_changes(read: _Reader) -> SchemaChanges:
    """SCHEMA_CHANGES, or its older spelling for added columns (SCHEMA_DRIFT: add = evolve, ignore =
    discard_value) when only that is set."""
    if read.raw("SCHEMA_CHANGES") is None and read.raw("SCHEMA_DRIFT") is not None:
        drift = _one_of(read.value("SCHEMA_DRIFT"), read.name("SCHEMA_DRIFT"), ("add", "ignore"))
        return SchemaChanges.EVOLVE if drift == "add" else SchemaChanges.DISCARD_VALUE
    return SchemaChanges(_one_of(read.value("SCHEMA_CHANGES"), read.name("SCHEMA_CHANGES"),
                                 tuple(SchemaChanges)))


_MEMORY = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)$", re.I)


def _memory(text: str, name: str) -> str:
    if not _MEMORY.match(text) or float(re.sub(r"[^\d.]", "", text)) == 0:
        raise ConfigError(f"{name} {text!r} is not an amount of memory.",
                          "Write a size DuckDB takes, such as 512MB or 2GB.")
    return text


def _warn_zero(read: _Reader) -> None:
    """Zero is a valid RETENTION and LOOKBACK, and rarely what one means: said, not refused."""
    if read.raw("RETENTION") is not None and read.duration("RETENTION").total_seconds() == 0:
        log.warning("%s is 0: maintenance expires every snapshot but the latest, so time travel keeps "
                    "nothing (a week is 7d)", read.name("RETENTION"))
    if read.raw("LOOKBACK") is not None and read.duration("LOOKBACK").total_seconds() == 0:
        log.warning("%s is 0: a run re-reads nothing behind the watermark, so every late event waits for "
                    "%s (15m tolerates a quarter of an hour)", read.name("LOOKBACK"), actions.RECONCILE)


def _arrival_column(text: str, name: str) -> str | None:
    if text.lower() in ("none", "off", ""):
        return None
    if not _IDENT.match(text):
        raise ConfigError(f"{name} {text!r} is not a column name.",
                          "Name the source's arrival column (e.g. created_at), or write none.")
    return text


# our own families of keys: one of these that is not a setting is a typo, close to one or not
_OUR_PREFIXES = ("DUCKLAKE_", "SOURCE_")
_NEAR = 0.85  # difflib's ratio from which another key is taken for a misspelled one of ours


def refuse_unknown_keys(keys: Iterable[str], where: str) -> None:
    """A key that looks like a setting but is none (``DUCKLAKE_CATALGO``) stops the command: the
    setting it was meant to be would silently keep its default — an embedded catalog beside a
    real source, say."""
    for key in sorted(keys):
        if key in ENV_KEYS:
            continue
        near = _nearest_key(key)
        if near or key.startswith(_OUR_PREFIXES):
            raise ConfigError(
                f"{key} (in {where}) is not a setting" + (f"; did you mean {near}?" if near else "."),
                "Correct or remove it; nothing was read, started or loaded. Every setting is in the "
                "settings reference (docs/reference/settings.md).")


def _nearest_key(key: str) -> str | None:
    """The setting a misspelled ``key`` most likely meant (None: none is near)."""
    near = difflib.get_close_matches(key, list(ENV_KEYS), n=1, cutoff=_NEAR)
    return near[0] if near else None


def load_dotenv_strictly(path: Path) -> list[str]:
    """Read ``path`` into the environment (set variables win), refusing a file python-dotenv
    cannot parse: it would skip the line with a warning, and a skipped ``DUCKLAKE_CATALOG``
    silently sends every command to a brand-new embedded lake. Returns the file's keys."""
    from dotenv import load_dotenv
    from dotenv.parser import parse_stream

    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}.", "Fix or remove the file.") from None
    import io

    keys = []
    for binding in parse_stream(io.StringIO(text)):
        if binding.key:
            keys.append(binding.key)
        if binding.error:
            start = binding.original.string.split("=", 1)[0].strip()
            key = f" (starting {start!r})" if _IDENT.match(start.removeprefix("export ").strip()) else ""
            raise ConfigError(
                f"{path} line {binding.original.line}{key} cannot be parsed, so no setting of that file "
                "was used.", "Write KEY=value, one per line; quote a value with spaces or # in matching "
                "quotes (KEY='a b'), and close every quote.")
    load_dotenv(path, override=False)
    return keys


def _catalog(text: str | None, reader: str | None, reader_name: str) -> CatalogSpec | None:
    """DUCKLAKE_CATALOG, with the role read-only SQL reads it as when one is given."""
    if not text:
        if reader:
            raise ConfigError(f"{reader_name} is set without DUCKLAKE_CATALOG: the embedded default "
                              "catalog has a reader of its own.", f"Remove {reader_name}, or set "
                              "DUCKLAKE_CATALOG too.")
        return None
    catalog = CatalogSpec.parse(text)
    return catalog.with_reader(reader, reader_name) if reader else catalog


def _table_name(text: str, what: str) -> str:
    """``events`` -> ``public.events``; anything but ``[schema.]table`` of plain names is refused."""
    parts = text.split(".")
    if len(parts) > 2 or not all(_IDENT.match(part) for part in parts):
        raise ConfigError(f"{what} {text!r} is not a table name.",
                          "Use schema.table with letters, digits and underscores, e.g. public.events.")
    return text if len(parts) == 2 else f"public.{text}"


def _class_archive(text: str | None) -> Path | None:
    """SPARK_CLASS_ARCHIVE: a folder, ``off``, or unset for the user's cache folder."""
    if text is None:
        return user_cache() / "event-lake" / "jvm"
    if text.strip().lower() == "off":
        return None
    return Path(text).expanduser().absolute()


def _staging_path(text: str | None, what: str, home: Path) -> str:
    """An absolute folder (``file:///path`` is that folder) or ``s3://bucket/prefix``; other URI
    schemes are refused rather than becoming a local folder named ``s3a:``."""
    if text is None:
        return str(home / "staging")
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme.lower() == "s3" and rest.strip("/"):
            return f"s3://{rest.strip('/')}"
        if scheme.lower() != "file" or not rest.startswith("/"):
            raise ConfigError(
                f"{what} {text!r} uses a URI scheme staging does not support ({scheme}://); accepted: "
                "a folder (/mnt/shared/staging, ./staging), file:///absolute/path or s3://bucket/prefix.",
                "Use a folder mounted at the same absolute path on the driver and every Spark worker, "
                "or s3://bucket/prefix (Spark writes it through s3a:// itself).")
        text = rest
    return str(Path(text).expanduser().absolute())


def parse_spark_conf(pairs: list[str], what: str) -> dict[str, str]:
    """``["spark.executor.memory=4g", …]`` -> a dict; each key must be a Spark property."""
    conf: dict[str, str] = {}
    for pair in (p.strip() for p in pairs):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"spark\.[A-Za-z0-9_.\-]+", key):
            raise ConfigError(f"{what} entry {pair!r} is not spark.<property>=value.",
                              "Example: spark.executor.memory=4g (in SPARK_CONF, separate entries with ';').")
        conf[key] = value.strip()
    return conf


def _positive_int(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{what} {text!r} is not a positive whole number.",
                          f"Set {what} to e.g. 8, or unset it.")
    return int(text)


def _whole_number(text: str, what: str, most: int | None = None) -> int:
    if not text.isdigit():
        raise ConfigError(f"{what} {text!r} is not a whole number of 0 or more.",
                          f"Set {what} to e.g. 500, or 0 for none.")
    if most is not None and int(text) > most:
        raise ConfigError(f"{what} {text!r} is more than {most:,}.",
                          f"Set {what} to at most {most:,}, or 0 for none.")
    return int(text)


def _time_zone(text: str | None, what: str) -> str | None:
    """An IANA zone name (``Asia/Tokyo``, ``UTC``), checked here rather than by the first query."""
    if text is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{what} {text!r} is not a time zone name.",
                          "Use an IANA name such as UTC, Europe/Berlin or America/New_York, or unset it "
                          "to use the source database's own TimeZone.") from None
    return text


def _one_of(text: str, what: str, choices: tuple[str, ...]) -> str:
    if text.lower() not in choices:
        raise ConfigError(f"{what} {text!r} is not one of {', '.join(choices)}.",
                          f"Set {what} to one of them.")
    return text.lower()


def settings_of(**values: object) -> Settings:
    """Settings from keyword arguments named as the environment keys in lower case
    (``source_pg_dsn="postgresql://…"``, ``ducklake_catalog=…``, ``lookback=timedelta(minutes=15)``),
    the rest from their defaults — not from the environment or ``.env``: what a notebook passes is
    all there is. A name that is no setting is refused with the nearest one."""
    env: dict[str, str] = {}
    for name, value in values.items():
        key = name.upper()
        if key not in ENV_KEYS:
            near = _nearest_key(key)
            raise ConfigError(f"{name}= is not a setting" + (f"; did you mean {near.lower()}=?" if near
                                                              else "."),
                              "Settings take the environment keys' names in lower case: see the "
                              "settings reference (docs/reference/settings.md).")
        if value is not None:
            env[key] = _as_text(value)
    return load_settings(env, dotenv=False)


def _as_text(value: object) -> str:
    """A keyword argument as the environment would hold it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    return str(value)
