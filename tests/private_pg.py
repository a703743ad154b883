"""A private Postgres server for tests that stop it (outages) or need real password checks:
initdb + pg_ctl as the ``postgres`` OS user, on its own port and folder — never the machine's
shared server."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from tests.spark_services import free_port


def _bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise RuntimeError(f"{name} not found under /usr/lib/postgresql (apt-get install postgresql)")
    return str(found[-1])


def _as_postgres(*args: str) -> subprocess.CompletedProcess[str]:
    command = list(args) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)


@dataclass
class PrivatePostgres:
    """Superuser ``postgres`` with ``password``; scram-sha-256 on 127.0.0.1 (passwords checked)."""

    password: str
    port: int = field(default_factory=free_port)
    config: tuple[str, ...] = ()  # more server settings, "name=value" each
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="private-pg-")))

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{dbname}"

    def init(self) -> PrivatePostgres:
        shutil.chown(self.root, "postgres")
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        shutil.chown(pwfile, "postgres")
        _as_postgres(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=scram-sha-256",
                     f"--pwfile={pwfile}", "--no-sync")
        pwfile.unlink()
        return self.start()

    def start(self) -> PrivatePostgres:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        options += "".join(f" -c {setting}" for setting in self.config)
        _as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                     "-w", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        _as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def create_db(self, name: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", password=self.password,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
