"""A private PostgreSQL cluster for the cluster mode (Airflow's metadata database, as compose's postgres):
the Debian package's server binaries, `initdb` once with a password-protected superuser, on loopback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

from harvester.errors import ClusterError
from harvester.services.launcher import Service, StepPrinter
from harvester.services.ports import LOOPBACK


def postgres_bin() -> Path:
    """The directory of the Debian package's server binaries (initdb and postgres are not on PATH there)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not candidates:
        raise ClusterError("PostgreSQL is not installed: apt-get install -y postgresql (scripts/bootstrap.sh does)")
    return candidates[-1].parent


def data_directory(base_dir: Path) -> Path:
    """Where a cluster under ``base_dir`` keeps its data. As root it lives where the postgres user can reach it."""
    if os.geteuid() != 0:
        return base_dir / "postgres"
    digest = sha256(str(base_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"harvester-postgres-{digest}"


@dataclass(frozen=True)
class PostgresServer:
    """One server: its data under ``data``, superuser ``user`` with ``password``, listening on ``port``."""

    data: Path
    port: int
    user: str
    password: str
    fast_unsafe: bool = False  # fsync off: for throwaway clusters (tests) only

    @property
    def system_user(self) -> str | None:
        """PostgreSQL refuses to run as root: then it runs as the package's postgres user."""
        return "postgres" if os.geteuid() == 0 else None

    def service(self, env: Mapping[str, str], port_variable: str) -> Service:
        command = [str(postgres_bin() / "postgres"), "-D", str(self.data / "data"), "-p", str(self.port),
                   "-c", f"listen_addresses={LOOPBACK}", "-c", "unix_socket_directories=", "-c", "max_connections=200"]
        if self.fast_unsafe:
            command += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        # SIGINT is PostgreSQL's fast shutdown; SIGTERM would wait for every client to leave
        return Service("postgres", [command], env, port=self.port, port_variable=port_variable, ready=self.ready,
                       ready_timeout=60, user=self.system_user, cwd=Path(tempfile.gettempdir()),
                       stop_signal=signal.SIGINT)

    def initialise(self, env: Mapping[str, str], step: StepPrinter) -> None:
        """`initdb` once: a password-protected superuser for Airflow, as the compose postgres service has."""
        data = self.data / "data"
        if (data / "PG_VERSION").exists():
            return
        step(f"postgres: initdb in {data}")
        self.data.mkdir(parents=True, exist_ok=True)
        password_file = self.data / "password"
        password_file.write_text(self.password + "\n")
        if self.system_user is not None:
            import pwd

            account = pwd.getpwnam(self.system_user)
            for path in (self.data, password_file):
                os.chown(path, account.pw_uid, account.pw_gid)
        self.data.chmod(0o700)
        result = subprocess.run(
            [str(postgres_bin() / "initdb"), "-D", str(data), "-U", self.user, f"--pwfile={password_file}",
             "--auth=scram-sha-256", "-E", "UTF8", "--no-instructions"],
            capture_output=True, text=True, user=self.system_user, cwd=tempfile.gettempdir(), env=dict(env),
            timeout=180,
        )
        password_file.unlink()
        if result.returncode != 0:
            raise ClusterError(f"initdb failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")

    def connect(self, dbname: str = "postgres", **options: Any) -> Any:
        """A psycopg2 connection as the superuser (the caller closes it)."""
        import psycopg2

        return psycopg2.connect(host=LOOPBACK, port=self.port, user=self.user, password=self.password,
                                dbname=dbname, **options)

    def ready(self) -> bool:
        self.connect(connect_timeout=2).close()
        return True

    def create_database(self, name: str) -> None:
        """CREATE DATABASE unless it exists."""
        connection = self.connect()
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()
