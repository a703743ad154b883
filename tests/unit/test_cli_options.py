"""Each command's options belong to it: one given with another command is refused before anything
runs, naming the option and the commands it belongs to (`--run --at-version 3` ran a load and
ignored the version, exit 0)."""

from __future__ import annotations

import json

import pytest

from pipeline import actions
from pipeline.cli.main import main
from pipeline.cli.parser import OPTION_OWNERS


@pytest.fixture(autouse=True)
def _library_voice_after():
    """main() makes library messages name flags for the process: back to the library's words after."""
    yield
    actions.speak(actions.LibraryVoice())


@pytest.mark.parametrize(("argv", "option", "command"), [
    (["--run", "--at-version", "3"], "--at-version", "--run"),
    (["--status", "--run-now"], "--run-now", "--status"),
    (["--verify", "--dry-run"], "--dry-run", "--verify"),
    (["status", "--since", "1h"], "--since", "--status"),  # the action as a word too
    (["--sql", "SELECT 1", "--show-secrets"], "--show-secrets", "--sql"),
    (["--snapshots", "--table", "main.events"], "--table", "--snapshots"),
])
def test_an_option_of_another_command_is_refused_naming_both(argv, option, command, capsys, monkeypatch):
    monkeypatch.setenv("SOURCE_PG_DSN", "postgresql://nobody@127.0.0.1:1/never")  # reached: a failure
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{option} belongs to {', '.join(OPTION_OWNERS[option])}, not {command}: nothing was run." in err


def test_the_refusal_is_one_json_document_with_json(capsys):
    assert main(["--run", "--at-version", "3", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "error" and "--at-version belongs to" in document["error"]


def test_every_owned_option_is_one_of_the_parsers_and_every_owner_a_command():
    from pipeline.cli.handlers import ACTIONS
    from pipeline.cli.parser import build_parser

    flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    commands = {action.flag for action in ACTIONS} | {"--sql", "--sql-file"}
    assert set(OPTION_OWNERS) <= flags
    assert {owner for owners in OPTION_OWNERS.values() for owner in owners} <= commands
