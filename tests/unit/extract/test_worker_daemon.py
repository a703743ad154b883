"""Which pyspark a local Spark's worker daemon imports: the installed one only at the zip's version."""

import sys
import zipfile
from pathlib import Path

import pytest

from pipeline.extract import worker_daemon


def _zip(path: Path, version: str) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pyspark/version.py", f'__version__ = "{version}"\n')
    return str(path)


def _install(folder: Path, version: str) -> str:
    (folder / "pyspark").mkdir(parents=True)
    (folder / "pyspark" / "version.py").write_text(f'__version__ = "{version}"\n')
    return str(folder)


@pytest.mark.parametrize(("installed", "moved"), [("4.3.0", True), ("4.2.1", False)])
def test_the_zip_goes_behind_an_install_of_its_own_version_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 installed: str, moved: bool) -> None:
    archive = _zip(tmp_path / "pyspark.zip", "4.3.0")
    site = _install(tmp_path / "site", installed)
    monkeypatch.setattr(sys, "path", [archive, "/nowhere", site])
    worker_daemon.installed_first()
    assert sys.path == (["/nowhere", site, archive] if moved else [archive, "/nowhere", site])


def test_an_unreadable_zip_stays_where_spark_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "pyspark.zip"
    broken.write_bytes(b"not a zip")
    site = _install(tmp_path / "site", "4.3.0")
    monkeypatch.setattr(sys, "path", [str(broken), site])
    worker_daemon.installed_first()
    assert sys.path == [str(broken), site]
