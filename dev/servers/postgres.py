"""A throwaway PostgreSQL server from Debian's ``postgresql`` package (tests, benchmarks).

``initdb`` into a temporary folder, then ``postgres`` on a free loopback port
(TCP only, no Unix socket), a superuser with a password (scram-sha-256), and
stopped and deleted on exit. PostgreSQL refuses to run as root, so as root the
cluster belongs to the package's ``postgres`` account.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from dev.servers.s3 import free_port

USER = "ingest"


def bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` that holds a server, else None."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/postgres")]
    return max(found, key=lambda p: int(p.parent.name), default=None)


class PostgresServer:
    """``postgres`` on a free loopback port; ``url(database)`` names a database of it."""

    def __init__(self) -> None:
        found = bin_dir()
        if found is None:
            raise RuntimeError("no PostgreSQL under /usr/lib/postgresql (Debian's package)")
        self.bin = found
        self.port = free_port()
        # A password that is easy to look for in every output.
        self.password = f"pw-{secrets.token_hex(12)}"
        self.root = Path(tempfile.mkdtemp(prefix="ingest-pg-"))
        self.data = self.root / "data"
        self.account: Any = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "postgres.log"

    def _as_owner(self) -> dict[str, Any]:
        """``subprocess`` arguments that run a command as the cluster's owner."""
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    def __enter__(self) -> PostgresServer:
        try:
            if self.account is not None:
                os.chown(self.root, self.account.pw_uid, self.account.pw_gid)
            pwfile = self.root / "pwfile"
            pwfile.write_text(self.password + "\n")
            if self.account is not None:
                os.chown(pwfile, self.account.pw_uid, self.account.pw_gid)
            subprocess.run(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    USER,
                    "--pwfile",
                    str(pwfile),
                    "--auth",
                    "scram-sha-256",
                    "--encoding",
                    "UTF8",
                    "--no-sync",
                ],
                check=True,
                capture_output=True,
                cwd=self.root,
                **self._as_owner(),
            )
            pwfile.unlink()
            with self.log.open("wb") as log:
                self.proc = subprocess.Popen(
                    [
                        str(self.bin / "postgres"),
                        "-D",
                        str(self.data),
                        "-c",
                        "listen_addresses=127.0.0.1",
                        "-c",
                        f"port={self.port}",
                        "-c",
                        "unix_socket_directories=",
                        "-c",
                        "fsync=off",  # a test's cluster: speed over durability
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.root,
                    start_new_session=True,
                    **self._as_owner(),
                )
            self._wait_ready(time.monotonic() + 60)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.log.read_text()[-2000:]}")
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
                check=False,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.2)  # polling a port that is opening, with a deadline
        raise RuntimeError(f"postgres not ready on port {self.port}")

    def psql(self, sql: str, database: str = "postgres") -> list[list[str]]:
        """Run ``sql`` with ``psql``; the rows, fields split."""
        out = subprocess.run(
            [
                str(self.bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                USER,
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-A",
                "-t",
                "-F",
                "\t",
                "-c",
                sql,
            ],
            env={**os.environ, "PGPASSWORD": self.password},
            capture_output=True,
            text=True,
            check=True,
        )
        return [line.split("\t") for line in out.stdout.splitlines() if line]

    def create_database(self, name: str, owner: str = "prefect") -> str:
        """A new database owned by a new role without superuser rights (what a database
        administrator hands out: the recipe of docs/deployments-and-ui.md); its URL for the
        Prefect server."""
        self.psql(f"CREATE ROLE \"{owner}\" LOGIN PASSWORD '{self.password}'")
        self.psql(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        return self.url(name, owner)

    def url(self, database: str, user: str = USER) -> str:
        return f"postgresql+asyncpg://{user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: clients disconnected
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
