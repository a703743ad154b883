"""SOURCE_TABLES (``--tables``): several tables, each landing as ``main.<table>``; parsed and
refused at start, with the entry and the fix named."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import load_settings
from pipeline.settings.model import SubjectKey, TableSpec


def test_tables_are_read_in_order_with_their_default_columns_and_schema():
    settings = load_settings({"SOURCE_TABLES": "sessions, app.events:event_timestamp:event_id"})
    assert settings.tables == (TableSpec("public.sessions"), TableSpec("app.events"))
    assert [t.name for t in settings.tables] == ["sessions", "events"]
    assert [settings.lake_table(t) for t in settings.tables] == [
        "lake.main.sessions", "lake.main.events"]
    # a table's options live in its TableSpec alone: the settings hold no table of their own
    assert not any(hasattr(settings, name) for name in
                   ("source_table", "source_tables", "id_column", "time_column", "for_table", "events_table"))


def test_a_table_names_its_own_time_and_id_columns():
    settings = load_settings({"SOURCE_TABLES": "public.sessions:started_at:session_id,public.events:occurred_at"})
    sessions, events = settings.tables
    assert (sessions.time_column, sessions.id_column) == ("started_at", "session_id")
    assert (events.time_column, events.id_column) == ("occurred_at", "event_id")
    assert sessions.names_own_columns and events.names_own_columns
    assert (events.schema, events.name) == ("public", "events")


def test_source_table_alone_means_one_table_and_no_one_can_tell_how_it_was_written():
    alone = load_settings({"SOURCE_TABLE": "app.clicks"})
    listed = load_settings({"SOURCE_TABLES": "app.clicks"})
    assert alone.tables == (TableSpec("app.clicks"),)
    assert alone == listed  # every field: nothing after reading the settings can tell the two apart


def test_the_flag_overrides_the_environment():
    settings = load_settings({"SOURCE_TABLES": "public.a"}, flags={"SOURCE_TABLES": ("--tables", "public.b,c")})
    assert [t.qualified for t in settings.tables] == ["public.b", "public.c"]


def test_the_keyed_form_names_any_option_and_reads_as_the_positional_one():
    keyed = load_settings({"SOURCE_TABLES": "public.sessions(id=session_id, time=started_at, "
                                            "subject=details.user_id), events(time=occurred_at)"})
    positional = load_settings({"SOURCE_TABLES": "public.sessions:started_at:session_id,events:occurred_at",
                                "SUBJECT_KEY": "sessions=details.user_id"})
    assert keyed.tables == positional.tables == (
        TableSpec("public.sessions", "started_at", "session_id", SubjectKey("details", ("user_id",))),
        TableSpec("public.events", "occurred_at"))
    assert keyed.subject_keys == {"sessions": SubjectKey("details", ("user_id",))}


def test_subject_key_fills_the_tables_that_say_none_and_may_not_contradict_one():
    settings = load_settings({"SOURCE_TABLES": "sessions(subject=user_id),events", "SUBJECT_KEY": "account_id"})
    assert {t.name: str(t.subject) for t in settings.tables} == {"sessions": "user_id", "events": "account_id"}
    same = load_settings({"SOURCE_TABLES": "sessions(subject=user_id)", "SUBJECT_KEY": "sessions=user_id"})
    assert str(same.tables[0].subject) == "user_id"
    with pytest.raises(ConfigError, match="SUBJECT_KEY names account_id as sessions's subject") as err:
        load_settings({"SOURCE_TABLES": "sessions(subject=user_id)", "SUBJECT_KEY": "sessions=account_id"})
    assert "one place" in err.value.hint
    with pytest.raises(ConfigError, match="--tables' entry for it says subject=user_id"):  # named as given
        load_settings({"SUBJECT_KEY": "sessions=account_id"},
                      flags={"SOURCE_TABLES": ("--tables", "sessions(subject=user_id)")})


@pytest.mark.parametrize(("value", "words"), [
    ("user_id,account_id", "gives two keys for every table (user_id, account_id)"),  # was: the last won
    ("events=a,events=b", "names events's key twice (a, b)"),
    ("=user_id", "'' is not a table this lake loads"),
    ("other.events=user_id", "'other.events' is not a table this lake loads (public.events, app.clicks)"),
    ("public.events=user_id,views=user_id", "'views' is not a table this lake loads"),
])
def test_a_subject_key_that_leaves_a_tables_key_in_doubt_is_refused(value, words):
    with pytest.raises(ConfigError) as err:
        load_settings({"SOURCE_TABLES": "events,app.clicks", "SUBJECT_KEY": value})
    assert words in str(err.value) and err.value.hint, str(err.value)


@pytest.mark.parametrize(("value", "words"), [
    ("public.sessions,", "'' is not schema.table"),
    ("public.sessions(time=started_at", "never closed"),
    ("public.sessions(time=a(b))", "nested parentheses"),
    ("public.sessions(when=started_at)", "'when=started_at' in 'public.sessions(when=started_at)' is not an option"),
    ("public.sessions(time=a, time=b)", "says time= twice"),
    ("public.sessions(time=started at)", "is not schema.table(time="),
    ("public.sessions(subject=a..b)", "'a..b' is not a column or a column.key path"),
    ("public.sessions(time=a)x", "is not schema.table(time="),
    ("public.sessions:a:b:c", "'public.sessions:a:b:c' is not schema.table"),
    ("public.events; DROP TABLE x", "is not a table name"),
    ("public.events,tenant.events", "two tables would land as main.events"),
    ("public.Items:at:id,public.items:at:id", "two tables would land as main.items"),  # DuckDB ignores case
    ("public.sessions:started at", "is not schema.table"),
])
def test_malformed_lists_are_refused_naming_the_entry(value, words):
    with pytest.raises(ConfigError) as err:
        load_settings({"SOURCE_TABLES": value})
    assert "SOURCE_TABLES" in str(err.value) and words in str(err.value), str(err.value)
    assert err.value.hint


def test_source_table_outside_the_list_is_refused_and_inside_it_accepted():
    with pytest.raises(ConfigError, match="SOURCE_TABLE 'public.other' and SOURCE_TABLES"):
        load_settings({"SOURCE_TABLE": "public.other", "SOURCE_TABLES": "public.sessions,public.events"})
    both = load_settings({"SOURCE_TABLE": "public.events", "SOURCE_TABLES": "public.sessions,public.events"})
    assert [t.name for t in both.tables] == ["sessions", "events"]
