"""Real Spark services from the pyspark package, on loopback, for the tests: a standalone
cluster (master + worker) and a Spark Connect server.

The worker can run in its own mount namespace with a private tmpfs over the staging folder:
exactly a worker on another host that does not share the driver's staging volume.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SPARK_CLASS = str(Path(sys.executable).parent / "spark-class")
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")
JDBC_JAR = "/usr/share/java/postgresql.jar"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class StandaloneCluster:
    work: Path
    hide: tuple[Path, ...] = ()  # folders the worker must not see (a tmpfs over each)
    cores: int = 1  # per worker
    master_port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def worker_dir(self) -> Path:
        return self.work / "worker"

    def start(self) -> StandaloneCluster:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(self.work)}
        self.work.mkdir(parents=True, exist_ok=True)
        self.procs.append(self._spawn(
            [SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.master_port), "--webui-port", str(self.ui_port)], env, "master.log"))
        try:
            self.add_worker()
        except BaseException:  # a cluster that did not come up leaves no master or worker behind
            self.stop()
            raise
        return self

    def add_worker(self) -> None:
        """Start a worker (one core) and wait until the master lists it as alive."""
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(self.work)}
        worker = [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                  "--cores", str(self.cores), "--memory", "2g", "--webui-port", str(free_port()),
                  "--work-dir", str(self.worker_dir)]
        if self.hide:
            for folder in self.hide:
                folder.mkdir(parents=True, exist_ok=True)
            mounts = " && ".join(f"mount -t tmpfs tmpfs {folder}" for folder in self.hide)
            shell = f"{mounts} && exec {' '.join(worker)}"
            worker = ["unshare", "-m", "--propagation", "private", "sh", "-c", shell]
        self.procs.append(self._spawn(worker, env, "worker.log"))
        self._wait_for_worker()

    def kill_worker(self) -> None:
        """SIGKILL the newest worker and the executors it launched (a machine lost mid-job)."""
        proc = self.procs.pop()
        os.killpg(proc.pid, 9)
        proc.wait(30)

    def _spawn(self, args: list[str], env: dict[str, str], log: str) -> subprocess.Popen:
        out = open(self.work / log, "ab")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_for_worker(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                    workers = json.load(r)["workers"]
                    if sum(w["state"] == "ALIVE" for w in workers) >= len(self.procs) - 1:
                        return
            except OSError:
                pass
            except ValueError:
                # HTML, not JSON: the master's UI answers before its /json handler is attached (seen
                # once in the suite), or another process took the free port first and the master bound
                # the next one, which its log names
                self.ui_port = self._bound_ui_port() or self.ui_port
            time.sleep(0.5)
        logs = "\n".join((self.work / n).read_text()[-2000:] for n in ("master.log", "worker.log")
                         if (self.work / n).exists())
        raise RuntimeError(f"the standalone cluster did not come up:\n{logs}")

    def _bound_ui_port(self) -> int | None:
        log = self.work / "master.log"
        found = re.findall(r"MasterWebUI.*started at http://[^:]+:(\d+)", log.read_text()) if log.exists() else []
        return int(found[-1]) if found else None

    def stop(self) -> None:
        for proc in reversed(self.procs):
            try:
                os.killpg(proc.pid, 15)
                proc.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, 9)
        shutil.rmtree(self.worker_dir, ignore_errors=True)

    def executor_logs(self) -> list[Path]:
        """stderr files of executors the worker ran (one per application)."""
        return sorted(self.worker_dir.glob("app-*/*/stderr"))


@dataclass
class ConnectServer:
    """``SparkConnectServer`` via spark-submit, with this environment's Python for its workers and
    the JDBC driver on its classpath when there is one. ``cores``
    differs from this machine's CPU count so a test can tell whose parallelism it got."""

    work: Path
    cores: int = 3
    master: str = ""  # a cluster's (spark://…); empty: local[cores]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> ConnectServer:
        self.work.mkdir(parents=True, exist_ok=True)
        log = self.work / "connect.log"
        seen = log.stat().st_size if log.exists() else 0  # a restart: only what this start logs counts
        # its Python workers run the arrow reader: this environment's interpreter (README)
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        jars = ["--jars", JDBC_JAR] if os.path.exists(JDBC_JAR) else []  # for SPARK_READER=jdbc only
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [SPARK_SUBMIT, "--master", self.master or f"local[{self.cores}]",
                 "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                 *jars, "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                 "--conf", f"spark.connect.grpc.binding.port={self.port}", "--conf", "spark.ui.enabled=false",
                 "--conf", "spark.driver.extraJavaOptions=-Duser.timezone=UTC"],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Spark Connect server started" in log.read_text(errors="replace")[seen:]:
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"the Spark Connect server did not start:\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, 9)
