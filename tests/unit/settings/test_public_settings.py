"""The public face: ``pipeline.Settings`` is the settings type, built from the environment keys'
names in lower case; a misspelled keyword is refused naming the nearest; ``__version__`` is the
project's."""

from __future__ import annotations

import tomllib
from datetime import timedelta
from typing import get_type_hints

import pytest

import pipeline
from pipeline.errors import ConfigError
from pipeline.settings.keys import ENV_KEYS
from pipeline.settings.model import SettingsKeywords
from tests.conftest import ROOT


def test_settings_built_from_keywords_are_of_the_settings_type():
    settings = pipeline.Settings(source_pg_dsn="postgresql://app@db/app", lookback=timedelta(minutes=5),
                                 source_tables="public.sessions:started_at:session_id,public.events")
    assert isinstance(settings, pipeline.Settings)
    assert settings.lookback == timedelta(minutes=5)
    assert [table.name for table in settings.tables] == ["sessions", "events"]
    assert isinstance(pipeline.load_settings({}), pipeline.Settings)  # what commands build, the same type


def test_a_misspelled_keyword_is_refused_naming_the_nearest():
    with pytest.raises(ConfigError, match=r"lookbak= is not a setting; did you mean lookback=\?"):
        pipeline.Settings(lookbak=timedelta(minutes=5))  # type: ignore[call-arg]  # mypy refuses it too


def test_the_keywords_are_the_environment_keys():
    assert set(get_type_hints(SettingsKeywords)) == {key.lower() for key in ENV_KEYS}


def test_the_version_is_the_projects():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert pipeline.__version__ == project["version"]
