"""The DAG integrity guards really catch what a DAG file must not do at parse time."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.config.dagbag_probe import parse_dag_folder

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


def test_the_probe_catches_network_variable_and_connection_lookups(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "naughty.py").write_text(textwrap.dedent("""\
        # an airflow dag file that does I/O at parse time
        import contextlib
        import socket

        from airflow.sdk import DAG, BaseHook, Variable

        with contextlib.suppress(Exception):
            socket.create_connection(("127.0.0.1", 9), timeout=1)
        with contextlib.suppress(Exception):
            socket.socket().connect(("127.0.0.1", 9))
        with contextlib.suppress(Exception):
            Variable.get("some_variable")
        with contextlib.suppress(Exception):
            BaseHook.get_connection("mongo_default")
        dag = DAG("naughty", schedule=None, tags=["x"])
    """))
    report = parse_dag_folder(dags, tmp_path / "airflow")
    forbidden = " | ".join(report["forbidden"])
    assert forbidden.count("network connection") == 2
    assert "Variable.get" in forbidden and "BaseHook.get_connection" in forbidden
    assert "naughty" in report["dags"]
