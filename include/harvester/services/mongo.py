"""Which MongoDB answers (DESIGN.md section 8): HARVESTER_MONGO_URI, else mongod on PATH, else SecantusDB."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harvester.connections import redact

__all__ = ["MongoChoice", "airflow_connection_uri", "choose_mongo", "redact"]

MongoKind = Literal["external", "mongod", "secantusdb"]


@dataclass(frozen=True)
class MongoChoice:
    """How to get a MongoDB: a URI to use as is, or a server command to start on a loopback port."""

    kind: MongoKind
    uri: str
    command: list[str] | None

    def describe(self) -> str:
        return {
            "external": f"the MongoDB at HARVESTER_MONGO_URI ({redact(self.uri)})",
            "mongod": f"a local mongod at {self.uri}",
            "secantusdb": f"the embedded stand-in SecantusDB at {self.uri} (slow; see README)",
        }[self.kind]


def choose_mongo(port: int, data_dir: Path, environ: dict[str, str] | None = None) -> MongoChoice:
    environ = dict(os.environ) if environ is None else environ
    if uri := environ.get("HARVESTER_MONGO_URI"):
        return MongoChoice("external", uri, None)
    local_uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    if mongod := shutil.which("mongod", path=environ.get("PATH")):
        command = [mongod, "--bind_ip", "127.0.0.1", "--port", str(port), "--dbpath", str(data_dir / "mongod")]
        return MongoChoice("mongod", local_uri, command)
    secantus = Path(sys.executable).with_name("secantusd-py")
    command = [
        str(secantus) if secantus.exists() else "secantusd-py",
        "--host", "127.0.0.1", "--port", str(port), "--storage-path", str(data_dir / "secantusdb"),
    ]
    return MongoChoice("secantusdb", local_uri, command)


def airflow_connection_uri(uri: str) -> str:
    """The Airflow connection URI of a MongoDB URI: MongoHook wants conn_type 'mongo' (and srv=true
    in the extras instead of a mongodb+srv scheme)."""
    if uri.startswith("mongodb+srv://"):
        rest = uri.removeprefix("mongodb+srv://")
        separator = "&" if "?" in rest else ("?" if rest.count("/") else "/?")
        return f"mongo://{rest}{separator}srv=true"
    if uri.startswith("mongodb://"):
        return "mongo://" + uri.removeprefix("mongodb://")
    return uri
