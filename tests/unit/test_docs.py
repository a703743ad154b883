"""The README, the docs site and .env.example document every setting, flag, module and error
(pure reads of the tree)."""

from __future__ import annotations

import re

from pipeline.settings import ENV_KEYS
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def test_readme_opens_with_the_two_commands():
    commands = re.findall(r"^uv run .*$", README, flags=re.M)[:2]
    assert commands == ["uv run events_pipeline.py --demo", "uv run --dev pytest"]


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 250, "README.md is for newcomers: move details into docs/"


def test_the_reference_pages_are_generated_from_the_code():
    """docs/reference/ is what pipeline.cli.reference makes of the settings keys and both parsers."""
    from pipeline.cli import reference

    assert reference.main(["--check"]) == 0, "run: uv run python -m pipeline.cli.reference"


def test_every_setting_is_in_env_example_and_the_settings_reference():
    example = (ROOT / ".env.example").read_text()
    page = (DOCS / "reference" / "settings.md").read_text()
    for key in ENV_KEYS:
        assert re.search(rf"^#?\s*{key}=", example, flags=re.M), f"{key} missing from .env.example"
        assert f"`{key}`" in page, f"{key} missing from docs/reference/settings.md"


def test_every_cli_flag_is_in_the_cli_reference():
    from generators.cli import build_parser as generator_parser
    from pipeline.cli.parser import build_parser as pipeline_parser

    page = (DOCS / "reference" / "cli.md").read_text()
    for parser in (pipeline_parser(), generator_parser()):
        for action in parser._actions:
            for flag in action.option_strings:
                assert f"`{flag}`" in page, f"{parser.prog} {flag} is not in docs/reference/cli.md"


def _shown_commands(text: str, script: str) -> list[str]:
    """The commands a page shows for ``script`` in its sh blocks, comments cut."""
    commands, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh"
            continue
        line = line.split(" # ", 1)[0].strip()
        if inside and line.startswith(f"uv run {script} "):
            commands.append(line.removeprefix(f"uv run {script} "))
    return commands


def test_every_command_the_docs_show_is_one_the_parsers_accept():
    """A renamed flag or a misspelt value in an example fails here, not for the reader."""
    import shlex

    from generators.cli import build_parser as generator_parser
    from pipeline.cli.main import action_words
    from pipeline.cli.parser import build_parser as pipeline_parser

    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    checked = 0
    for page in pages:
        text = page.read_text()
        for script, parser in (("events_pipeline.py", pipeline_parser()),
                               ("insert_event_data_loop.py", generator_parser())):
            for command in _shown_commands(text, script):
                if "[" in command or "…" in command:  # a pattern (optional parts, elisions), not a command
                    continue
                argv = shlex.split(command)
                if script == "events_pipeline.py":
                    argv = action_words(argv)
                try:
                    parser.parse_args(argv)
                except SystemExit as exc:
                    raise AssertionError(f"{page.relative_to(ROOT)}: {script} {command}") from exc
                checked += 1
    assert checked >= 40, checked


def test_every_docs_link_the_program_prints_exists():
    """Each error class names its troubleshooting section, and the --help epilog the settings
    reference: each must exist (an explicit {#id} anchor or a heading)."""
    import importlib
    import pkgutil

    import pipeline
    from pipeline.cli import docs_links
    from pipeline.errors import PipelineError

    for module in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        importlib.import_module(module.name)
    classes, todo = set(), [PipelineError]
    while todo:
        cls = todo.pop()
        classes.add(cls)
        todo += cls.__subclasses__()
    links = {docs_links.for_error(cls("x")) for cls in classes} | {docs_links.UNEXPECTED, docs_links.SETTINGS}
    links = {link.removeprefix(f"{ROOT}/") for link in links}  # absolute when the tests run elsewhere
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), link
        if anchor:
            text = (ROOT / path).read_text()
            headings = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-")
                        for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}
            assert f"{{#{anchor}}}" in text or anchor in headings, f"{link}: no such section"


def test_the_library_names_no_flag():
    """Below the command line a message that sends the user somewhere holds a pipeline.actions
    action, and the command line's voice (pipeline/cli/voice.py) is the one place that makes it a
    flag; the library imports nothing of the command line. (Docstrings and comments may name flags;
    messages may not spell them.)"""
    import ast

    from pipeline import actions
    from pipeline.cli import voice
    from pipeline.cli.parser import build_parser

    defined = {flag for action in build_parser()._actions for flag in action.option_strings}
    assert set(voice.FLAGS) == set(actions.ALL)
    assert set(voice.FLAGS.values()) <= defined, set(voice.FLAGS.values()) - defined
    spelled = []
    for path in (ROOT / "pipeline").rglob("*.py"):
        if {"cli", "settings"} & set(path.relative_to(ROOT).parts):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                named = [flag for flag in re.findall(r"--[a-z][a-z-]+", node.value) if flag in defined]
                spelled += [f"{path.relative_to(ROOT)}:{node.lineno}: {flag}" for flag in named]
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline.cli"):
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {node.module}")
    assert not spelled, "say these through pipeline.actions:\n" + "\n".join(spelled)


def test_a_library_message_speaks_the_front_ends_words():
    """The same judgement says ``Pipeline.run()`` to a library user and ``--run`` on the command line."""
    from datetime import UTC, datetime, timedelta

    from pipeline import actions
    from pipeline.cli import voice
    from pipeline.ops.health import assess

    def reasons() -> str:
        now = datetime.now(UTC)
        return " ".join(assess(now, timedelta(hours=1), None, "failed", None, 2, 0).reasons)

    library = reasons()
    assert "Pipeline.run()" in library and "Pipeline.retry_failed()" in library and "--" not in library
    try:
        voice.install()
        said = reasons()
    finally:
        actions.speak(actions.LibraryVoice())
    assert "--run" in said and "--retry-failed" in said and "Pipeline." not in said


def test_only_the_settings_package_reads_the_environment():
    """So every key the product reads goes through ENV_KEYS (the loader refuses others)."""
    readers = []
    for path in [*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "generators").rglob("*.py")]:
        if "settings" in path.relative_to(ROOT).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            # setdefault/update hand a value to a child process (the JVM); they read nothing for us
            # (setdefault's result: what that child gets)
            if re.search(r"os\.environ(?!\.setdefault|\.update)|getenv\(", line):
                readers.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not readers, "read the environment through pipeline.settings instead:\n" + "\n".join(readers)


def test_the_code_map_names_every_module():
    page = (DOCS / "architecture.md").read_text()
    code_map = page[page.index("## Code map"):page.index("## Correctness guarantees")]
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        if path.name != "__init__.py":
            assert path.name in code_map, f"{path.relative_to(ROOT)} is missing from the code map (docs/architecture.md)"
    for package in sorted(p for p in (ROOT / "pipeline").iterdir() if (p / "__init__.py").exists()):
        assert f"{package.name}/" in code_map, f"pipeline/{package.name}/ is missing from the code map"


def test_the_install_constraints_are_the_lock_file_exported():
    """``uv tool install . -c constraints.txt`` installs what the tests ran with (without it uv
    resolves afresh: other versions, and a cold build of pyspark's sdist took 5:20)."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("uv") is None:
        pytest.skip("uv not on PATH")
    exported = subprocess.run(["uv", "export", "--frozen", "--no-dev", "--no-hashes", "--no-emit-project",
                               "--no-header"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    assert (ROOT / "constraints.txt").read_text() == exported.stdout, (
        "constraints.txt is stale: uv export --frozen --no-dev --no-hashes --no-emit-project --no-header "
        "-o constraints.txt")
