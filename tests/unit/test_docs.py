"""The README and .env.example document every setting, flag and module (pure reads of the tree)."""

from __future__ import annotations

import re

from pipeline.settings import ENV_KEYS
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_commands():
    commands = re.findall(r"^uv run .*$", README, flags=re.M)[:2]
    assert commands == ["uv run events_pipeline.py --demo", "uv run --dev pytest"]


def test_every_setting_is_documented_in_env_example_and_readme():
    example = (ROOT / ".env.example").read_text()
    for key in ENV_KEYS:
        assert re.search(rf"^#?\s*{key}=", example, flags=re.M), f"{key} missing from .env.example"
        assert key in README, f"{key} missing from README"


def test_every_cli_flag_is_documented_in_the_readme():
    from generators.cli import build_parser as generator_parser
    from pipeline.cli.parser import build_parser as pipeline_parser

    for parser in (pipeline_parser(), generator_parser()):
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in README, f"{parser.prog} {flag} is not documented in README.md"


def test_library_messages_name_flags_only_through_pipeline_invocation():
    """Below the command line, a message that sends the user to a flag takes it from
    pipeline.invocation, which names each flag the parser defines: a renamed flag cannot leave a
    stale hint behind. (Docstrings and comments may name flags; messages may not spell them.)"""
    import ast

    from pipeline import invocation
    from pipeline.cli.parser import build_parser

    defined = {flag for action in build_parser()._actions for flag in action.option_strings}
    assert set(invocation.FLAGS) <= defined, set(invocation.FLAGS) - defined
    spelled = []
    for path in (ROOT / "pipeline").rglob("*.py"):
        if {"cli", "settings"} & set(path.relative_to(ROOT).parts) or path.name == "invocation.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                named = [flag for flag in re.findall(r"--[a-z][a-z-]+", node.value) if flag in defined]
                spelled += [f"{path.relative_to(ROOT)}:{node.lineno}: {flag}" for flag in named]
    assert not spelled, "name these through pipeline.invocation:\n" + "\n".join(spelled)


def test_only_the_settings_package_reads_the_environment():
    """So every key the product reads goes through ENV_KEYS (the loader refuses others)."""
    readers = []
    for path in [*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "generators").rglob("*.py")]:
        if "settings" in path.relative_to(ROOT).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            # setdefault/update hand a value to a child process (the JVM); they read nothing for us
            if re.search(r"os\.environ(?!\.setdefault|\.update)|getenv\(", line):
                readers.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not readers, "read the environment through pipeline.settings instead:\n" + "\n".join(readers)


def test_the_code_map_names_every_module():
    code_map = README[README.index("### Code map"):README.index("## Correctness guarantees")]
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        if path.name != "__init__.py":
            assert path.name in code_map, f"{path.relative_to(ROOT)} is missing from the README code map"
    for package in sorted(p for p in (ROOT / "pipeline").iterdir() if (p / "__init__.py").exists()):
        assert f"{package.name}/" in code_map, f"pipeline/{package.name}/ is missing from the code map"
