"""One redactor for every printout (URIs with user info or password-like query keys, Airflow connections in their
JSON form), and secret files that are private from their first byte."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from harvester.connections import redact
from harvester.services.cluster import Cluster, ClusterPorts, ClusterSecrets
from harvester.services.launcher import write_missing_files

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text,secret,kept", [
    ("mongodb://user:pw-1@host:1/db", "pw-1", "mongodb://user:***@host:1/db"),
    ("redis://:pw-2@h:6379/0?sentinel_password=pw-3&db=1", "pw-3", "db=1"),
    ("sentinel://h:26379/0?password=pw-4&master_name=primary", "pw-4", "master_name=primary"),
    ("http://proxy.example:3128/?token=pw-5", "pw-5", "proxy.example:3128"),
    ("mongodb://u:pw-6@h1:1,h2:2/db?replicaSet=rs", "pw-6", "h1:1,h2:2/db?replicaSet=rs"),
    ('{"conn_type": "http", "host": "proxy.example", "port": 3128, "login": "crawler", "password": "pw-7", '
     '"extra": {"proxy_password": "pw-8", "url": "http://a:pw-9@c/"}}', "pw-", '"host": "proxy.example"'),
])
def test_the_redactor_hides_every_form_of_a_password(text: str, secret: str, kept: str) -> None:
    redacted = redact(text)
    assert secret not in redacted and kept in redacted, redacted


def test_plain_uris_and_text_are_left_as_they_are() -> None:
    for text in ("mongodb://host:1/", "http://user@host/x?page=2", "no uri here", "redis://h:6379/0"):
        assert redact(text) == text


def test_the_cluster_printout_masks_a_proxy_connection_in_its_json_form(tmp_path: Path) -> None:
    """``make run MODE=cluster`` printed a JSON-form proxy connection with its password."""
    proxy = json.dumps({"conn_type": "http", "host": "proxy.example", "port": 3128, "login": "crawler",
                        "password": "proxy-pass-1"})
    cluster = Cluster(tmp_path / "cluster", ClusterPorts(), mongo_uri="mongodb://u:mongo-pass@127.0.0.1:1/?"
                      "password=mongo-pass-2", demo_site_url="http://127.0.0.1:2",
                      environ={"PATH": "/usr/bin", "AIRFLOW_CONN_PROXY_SG": proxy})
    printed = cluster.describe()
    assert "proxy.example" in printed, printed
    assert "proxy-pass-1" not in printed and "mongo-pass" not in printed, printed


@pytest.fixture
def no_chmod_after(monkeypatch):
    """A file is private from its first byte only if it never needs a chmod after the write: forbid it."""
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_secret_files_are_created_private(tmp_path: Path, no_chmod_after) -> None:
    ClusterSecrets.load_or_create(tmp_path / "secrets.json")
    write_missing_files(((tmp_path / "sentinel.conf", "requirepass x\n"),))
    for path in (tmp_path / "secrets.json", tmp_path / "sentinel.conf"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
    assert not list(tmp_path.glob(".*"))  # no temporary file left beside them
