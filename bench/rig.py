"""What the benches share: the processes a bench starts (each logging to a file in the bench's directory,
all stopped by pid at the end) and the servers they start on free loopback ports: redis-server, MongoDB
(HARVESTER_MONGO_URI, else mongod, else the SecantusDB stand-in) and the demo site, which counts the
requests of each client.

Imported by the bench scripts beside it (their directory is first on ``sys.path``); Harvester's modules
are imported inside the functions, after the bench has parsed its arguments.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Not a bench: tests/test_benches.py runs only the modules that declare PROMISED_KEYS.
NOT_A_BENCH = "the benches' shared rig"
ROOT = Path(__file__).resolve().parents[1]


def shared_corpora() -> Path:
    """``../shared/corpora`` beside the repository, or beside its main checkout when this is a git worktree (the
    public test material; a user's clone has none, and the benches that read it say so instead of failing)."""
    roots = [ROOT]
    git = ROOT / ".git"
    if git.is_file() and (line := git.read_text().strip()).startswith("gitdir:"):
        roots.append(Path(line.split(":", 1)[1].strip()).parents[2])  # <main>/.git/worktrees/<name>
    for root in roots:
        if (root.parent / "shared" / "corpora").is_dir():
            return root.parent / "shared" / "corpora"
    return ROOT.parent / "shared" / "corpora"
BIN = Path(sys.executable).parent
# Every field of a demo product page (harvester_demo's /product/<n>), read by CSS: the benches' source attributes
DEMO_PRODUCT_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "sku": {"css": ".sku", "required": True}, "title": {"css": "h1.title"},
    "price": {"css": ".price", "type": "float"}, "stock": {"css": ".stock", "type": "int"},
    "in_stock": {"css": ".in-stock", "type": "bool"},
    "released": {"css": "time.released::attr(datetime)", "type": "date"},
    "image": {"css": "img.photo::attr(src)", "type": "url"},
    "tags": {"css": "li.tag", "type": "list[str]"}, "ratings": {"css": "li.rating", "type": "list[int]"},
    "description": {"css": ".description"},
}



@functools.cache
def deepest_listing() -> int:
    """The deepest ``listing.max_depth`` a source may say (the schema's bound): a listing walked from one first
    request has at most this many pages after it (a demo shop's pagination, an API's cursor chain)."""
    from harvester.config import Listing

    return int(Listing.model_json_schema()["properties"]["max_depth"]["maximum"])

class Processes:
    """Every process this bench starts, stopped (by pid, in reverse order) at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.sources = directory / "sources"  # the bench's HARVESTER_SOURCES_DIR
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.directory / f"{name}.log").open("ab")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env or dict(os.environ), cwd=ROOT, start_new_session=True)
        log.close()
        self.started.append(process)
        return process

    def stop(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
        if process in self.started:
            self.started.remove(process)

    def stop_all(self) -> None:
        for process in reversed(list(self.started)):
            self.stop(process)


@contextmanager
def bench_processes(bench: str, keep: bool = False) -> Iterator[Processes]:
    """The processes of one bench run, in a temporary directory of their own (logs, ``sources``): all
    stopped at the end, and the directory removed unless ``keep``."""
    directory = Path(tempfile.mkdtemp(prefix=f"harvester-bench-{bench}-"))
    processes = Processes(directory)
    processes.sources.mkdir()
    try:
        yield processes
    finally:
        processes.stop_all()
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            print(f"logs kept in {directory}", file=sys.stderr)


def start_redis(processes: Processes) -> str:
    """A redis-server without persistence in the bench's directory; its URL once it answers."""
    from harvester.services import readiness
    from harvester.services.ports import LOOPBACK, free_port

    port = free_port()
    url = f"redis://{LOOPBACK}:{port}/0"
    processes.start("redis", ["redis-server", "--bind", LOOPBACK, "--port", str(port), "--save", "",
                              "--appendonly", "no", "--dir", str(processes.directory)])
    readiness.wait_until(lambda: readiness.redis_ping(url), 20, "redis-server")
    return url


def start_mongo(processes: Processes) -> tuple[Any, subprocess.Popen | None]:
    """The MongoDB the bench writes to (``choose_mongo``'s choice), and its process when the bench started
    one (None for a server HARVESTER_MONGO_URI names), once it answers."""
    from harvester.services import readiness
    from harvester.services.mongo import choose_mongo
    from harvester.services.ports import free_port

    choice = choose_mongo(free_port(), processes.directory)
    if choice.command is None:
        return choice, None
    (processes.directory / "mongod").mkdir()
    process = processes.start("mongo", choice.command)
    readiness.wait_until(lambda: readiness.mongo_ping(choice.uri), 90, choice.kind)
    return choice, process


def start_listening(processes: Processes, name: str,
                    command: Callable[[int], list[str]]) -> tuple[subprocess.Popen, int]:
    """``command(port)`` started on a free loopback port: its process and port once it listens."""
    from harvester.services import readiness
    from harvester.services.ports import LOOPBACK, free_port

    port = free_port()
    process = processes.start(name, command(port))
    readiness.wait_until(lambda: readiness.tcp_open(LOOPBACK, port), 30, name)
    return process, port


def start_demo_site(processes: Processes, *options: str) -> tuple[subprocess.Popen, int, str]:
    """The demo site with ``options`` (``--products 500`` ...): its process, port and URL once it listens."""
    from harvester.services.ports import LOOPBACK

    process, port = start_listening(processes, "demo-site", lambda port: [
        str(BIN / "harvester-demo-site"), "--host", LOOPBACK, "--port", str(port), *options])
    return process, port, f"http://{LOOPBACK}:{port}"


def site_stats(site_url: str, client: str) -> dict[str, Any]:
    """What the demo site counted of one client (its ``X-Demo-Client``): total requests, most in flight."""
    with urllib.request.urlopen(f"{site_url}/_stats", timeout=10) as response:
        return json.load(response)["clients"].get(client, {"total": 0, "max_concurrent": 0})


def run_until_idle(runner: Any, store: Any, source: str, pause_seconds: float, deadline: float | None = None) -> bool:
    """Admit and run ``source``'s batches of 16 in this process (what a Celery worker does with each message) until
    it has nothing pending, delayed or active; False when ``deadline`` (monotonic) came first."""
    while deadline is None or time.monotonic() < deadline:
        admission = store.admit(source, 16)
        if admission.messages:
            runner.run(admission.deliveries())
            continue
        stats = store.stats([source])[source]
        if stats.pending == 0 and stats.delayed == 0 and stats.active == 0:
            return True
        time.sleep(pause_seconds)
    return False
