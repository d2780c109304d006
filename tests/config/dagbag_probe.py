"""Parse a DAG folder with a real Airflow DagBag in THIS process and print what came out as JSON.

Run as a subprocess (AIRFLOW_HOME pointing at a scratch directory) so Airflow's configuration and
the guards below never leak into the test process. The guards record, and refuse, what a DAG file
must never do at parse time: open a network connection, look up a Variable or a Connection, or
touch the metadata database.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FORBIDDEN: list[str] = []


def _guard_network() -> None:
    original_connect = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            FORBIDDEN.append(f"network connection to {address!r}")
            raise OSError(f"network access during DAG parsing: {address!r}")
        original_connect(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign]
    original_create = socket.create_connection

    def create_connection(address: object, *args: object, **kwargs: object) -> socket.socket:
        FORBIDDEN.append(f"network connection to {address!r}")
        raise OSError(f"network access during DAG parsing: {address!r}")

    socket.create_connection = create_connection  # type: ignore[assignment]
    del original_create


def _guard_airflow_lookups() -> None:
    import sqlalchemy
    from sqlalchemy.engine import Engine

    def refuse(what: str):
        def lookup(*args: object, **kwargs: object) -> None:
            FORBIDDEN.append(f"{what}{args[1:] if args else ''}")
            raise RuntimeError(f"{what} during DAG parsing")

        return classmethod(lambda cls, *args, **kwargs: lookup(cls, *args, **kwargs))

    from airflow.sdk import BaseHook, Connection, Variable

    Variable.get = refuse("Variable.get")  # type: ignore[method-assign]
    Connection.get = refuse("Connection.get")  # type: ignore[method-assign]
    BaseHook.get_connection = refuse("BaseHook.get_connection")  # type: ignore[method-assign]

    @sqlalchemy.event.listens_for(Engine, "connect")
    def _database(*args: object) -> None:
        FORBIDDEN.append("metadata database connection")


def parse_dag_folder(dags_folder: Path, airflow_home: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this probe in a fresh interpreter (as Airflow's DAG processor does) and return its report."""
    airflow_home.mkdir(parents=True, exist_ok=True)
    process_env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        **(env or {}),
    }
    result = subprocess.run(
        [sys.executable, __file__, str(dags_folder)], env=process_env, capture_output=True, text=True,
        timeout=180, check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"DagBag probe failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dags_folder")
    parser.add_argument("--no-guards", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_guards:
        _guard_network()
    from airflow.dag_processing.dagbag import DagBag

    if not args.no_guards:
        _guard_airflow_lookups()
    started = time.perf_counter()
    bag = DagBag(dag_folder=args.dags_folder, safe_mode=True)
    elapsed = time.perf_counter() - started
    dags = {}
    for dag_id, dag in bag.dags.items():
        dags[dag_id] = {
            "fileloc": dag.fileloc,
            "tags": sorted(dag.tags),
            "owner": dag.owner,
            "default_args": {key: str(value) for key, value in dag.default_args.items()},
            "retries": [task.retries for task in dag.tasks],
            "schedule": None if dag.schedule is None else str(dag.schedule),
            "params": {key: dag.params[key] for key in dag.params},
            "param_schemas": {key: dag.params.get_param(key).schema for key in dag.params},
            "tasks": sorted(dag.task_ids),
            "doc_md": dag.doc_md,
            "max_active_runs": dag.max_active_runs,
            "catchup": dag.catchup,
        }
    print(json.dumps({
        "dags": dags,
        "import_errors": bag.import_errors,
        "forbidden": FORBIDDEN,
        "parse_s": elapsed,
    }, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
