"""The launcher core of `make run`, both modes: services as data, and one supervisor that starts each in a
process group of its own, with a PID file under ``run_dir`` and a log under ``log_dir``, waits until it
answers, and stops exactly what was started.

The embedded stack (:mod:`harvester.services.stack`) and the compose topology
(:mod:`harvester.services.cluster`) only declare their services and configure this; a second start starts
nothing twice, and ``stop`` also stops a group whose PID file is left from a service no longer declared.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harvester.errors import LaunchError
from harvester.services.pidfiles import PidFile, signal_group, wait_group_gone
from harvester.services.ports import LOOPBACK, is_port_free

VENV_BIN = Path(sys.executable).parent  # the console scripts (harvester, airflow, celery) beside this Python
STOP_SECONDS = 30.0  # a warm shutdown: a Celery worker finishes its batch first
KILL_SECONDS = 10.0
POLL_SECONDS = 0.2
STARTED_SECONDS = 1.0  # a service without a readiness probe is started when it is still alive after this
LOG_TAIL_LINES = 15

StepPrinter = Callable[[str], None]


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


class TimedSteps:
    """A step printer that shows the seconds since the launcher began (the cluster takes minutes)."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"==> [{time.monotonic() - self.started:6.1f}s] {message}", flush=True)


def with_venv_on_path(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this virtualenv's console scripts first on PATH (Airflow starts `airflow` by name)."""
    return {**env, "PATH": f"{VENV_BIN}:{env.get('PATH', '')}"}


@dataclass
class Service:
    """One service: a process group whose first command leads it (a worker host's other commands join it)."""

    name: str
    commands: list[list[str]]
    env: Mapping[str, str]
    port: int | None = None  # a loopback port it listens on, checked free before the start
    port_variable: str | None = None  # the variable that moves ``port``, named when the port is taken
    ready: Callable[[], bool] | None = None  # None: started when still alive after STARTED_SECONDS
    ready_timeout: float = 60.0
    user: str | None = None  # run as this system user (PostgreSQL refuses to run as root)
    cwd: Path | None = None  # None: the supervisor's
    stop_signal: int = signal.SIGTERM
    directories: tuple[Path, ...] = ()  # created before the start (data directories)
    # (path, text) written before the start unless the file exists: a configuration the server rewrites
    # itself and must find again after a restart (a sentinel records the primary it follows there)
    files: tuple[tuple[Path, str], ...] = ()

    @property
    def command(self) -> list[str]:
        """The group leader's command."""
        return self.commands[0]


def write_private_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only from the first byte: a private temporary file created
    0600 (never written world-readable and chmodded after, which leaves a moment, and a file, others may read),
    then renamed over ``path``, so an older world-readable file is replaced rather than rewritten in place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def write_missing_files(files: tuple[tuple[Path, str], ...]) -> None:
    """Write each (path, text) whose file does not exist yet (mode 0600 from the start: it may hold a password)."""
    for path, text in files:
        if not path.exists():
            write_private_file(path, text)


class Supervisor:
    """Starts, waits for, stops and reports the services of one launcher mode."""

    def __init__(self, run_dir: Path, log_dir: Path, cwd: Path, step: StepPrinter = step) -> None:
        self.run_dir = run_dir
        self.log_dir = log_dir
        self.cwd = cwd
        self.step = step
        self._processes: dict[str, list[subprocess.Popen[bytes]]] = {}

    def pid_file(self, name: str) -> PidFile:
        return PidFile(self.run_dir / f"{name}.pid")

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def running(self, name: str) -> int | None:
        """The service's process group while any process of it is alive."""
        return self.pid_file(name).running_group()

    # -- starting ------------------------------------------------------------------------------
    def start_all(self, services: list[Service]) -> None:
        """Start the services that do not run yet, together, then wait until every one answers."""
        self.wait_ready([service for service in services if self.start(service)])

    def start(self, service: Service) -> bool:
        """Start ``service`` unless it runs; True when it was started now (the caller waits for it)."""
        if (group := self.running(service.name)) is not None:
            self.step(f"{service.name}: already running (pid {group})")
            return False
        if service.port is not None and not is_port_free(service.port):
            hint = f"set {service.port_variable} to another port" if service.port_variable else "move it"
            raise self.failure(service.name, f"port {LOOPBACK}:{service.port} is taken by another program; "
                                             f"stop it or {hint}")
        self.step(f"{service.name}: starting" + (f" on {LOOPBACK}:{service.port}" if service.port else ""))
        for directory in (self.run_dir, self.log_dir, *service.directories):
            directory.mkdir(parents=True, exist_ok=True)
        write_missing_files(service.files)
        processes: list[subprocess.Popen[bytes]] = []
        with self.log_path(service.name).open("ab") as log:
            for command in service.commands:
                processes.append(subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(service.env),
                    cwd=service.cwd or self.cwd, user=service.user,
                    # the first process leads a new process group; the others of the service join it
                    process_group=0 if not processes else processes[0].pid,
                ))
        self.pid_file(service.name).write(processes[0].pid)
        self._processes[service.name] = processes
        return True

    def wait_ready(self, services: list[Service]) -> None:
        """Wait for services started together; the first one that exits or runs out of time fails the start."""
        began = time.monotonic()
        waiting = list(services)
        last_errors: dict[str, BaseException] = {}
        while waiting:
            for service in list(waiting):
                codes = [process.poll() for process in self._processes.get(service.name, [])]
                if any(code is not None for code in codes):
                    raise self.failure(service.name, f"exited with code {next(c for c in codes if c is not None)}")
                waited = time.monotonic() - began
                if self._answers(service, waited, last_errors):
                    self.step(f"{service.name}: ready")
                    waiting.remove(service)
                elif waited > service.ready_timeout:
                    error = last_errors.get(service.name)
                    raise self.failure(service.name, f"not ready after {service.ready_timeout:.0f}s"
                                                     + (f" (last error: {error})" if error else ""))
            if waiting:
                time.sleep(POLL_SECONDS)

    @staticmethod
    def _answers(service: Service, waited: float, last_errors: dict[str, BaseException]) -> bool:
        if service.ready is None:
            return waited >= STARTED_SECONDS
        try:
            return bool(service.ready())
        except Exception as error:  # the service is still starting: any failure means "not yet"
            last_errors[service.name] = error
            return False

    def failure(self, name: str, reason: str) -> LaunchError:
        return LaunchError(f"step '{name}' failed: {reason}\n   its log: {self.log_path(name)}\n"
                           f"   {self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = LOG_TAIL_LINES) -> str:
        path = self.log_path(name)
        if not path.exists():
            return f"(no log at {path})"
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return f"last lines of {path}:\n     " + "\n     ".join(tail)

    # -- stopping ------------------------------------------------------------------------------
    def stop(self, services: list[Service]) -> None:
        """Stop in reverse start order; first any group left by a service no longer declared."""
        signals = {service.name: service.stop_signal for service in services}
        names = [*signals, *(path.stem for path in sorted(self.run_dir.glob("*.pid")) if path.stem not in signals)]
        for name in reversed(names):
            self.stop_one(name, signals.get(name, signal.SIGTERM))
        self.step("stopped")

    def stop_one(self, name: str, stop_signal: int = signal.SIGTERM) -> None:
        """``stop_signal`` to the group, SIGKILL after STOP_SECONDS."""
        pid_file = self.pid_file(name)
        group = pid_file.running_group()
        if group is not None:
            self.step(f"{name}: stopping (pid {group})")
            signal_group(group, stop_signal)
            if not wait_group_gone(group, STOP_SECONDS, reap=lambda: self._reap(name)):
                signal_group(group, signal.SIGKILL)
                wait_group_gone(group, KILL_SECONDS, reap=lambda: self._reap(name))
        pid_file.remove()
        self._reap(name)

    def kill(self, name: str) -> None:
        """SIGKILL the whole group at once, as a machine that loses power."""
        pid_file = self.pid_file(name)
        group = pid_file.read()
        if group is not None:
            signal_group(group, signal.SIGKILL)
            wait_group_gone(group, 20)
            pid_file.remove()
        self._reap(name)

    def _reap(self, name: str) -> None:
        """Collect the exit status of our own children of ``name`` (zombies otherwise) once they ended."""
        kept = [process for process in self._processes.pop(name, []) if process.poll() is None]
        if kept:
            self._processes[name] = kept

    # -- reporting -----------------------------------------------------------------------------
    def status(self, services: list[Service]) -> bool:
        """Print what runs (PID, port, log); True when every service runs."""
        width = max([18, *(len(service.name) + 2 for service in services)])
        all_running = True
        for service in services:
            group = self.running(service.name)
            state = f"running (pid {group})" if group else "stopped"
            port = f"{LOOPBACK}:{service.port}" if service.port else ""
            print(f"  {service.name:<{width}} {state:<22} {port:<18} log: {self.log_path(service.name)}")
            all_running &= group is not None
        return all_running


class Launcher(Protocol):
    """What `make run`, `make stop` and `make status` ask of a mode."""

    def run(self, trigger: bool = True) -> None: ...

    def stop(self) -> None: ...

    def status(self) -> bool: ...


def main(make_launcher: Callable[[], Launcher], prog: str, description: str | None,
         argv: list[str] | None = None) -> int:
    """``run|stop|status [--no-trigger]``: 0 when done, 3 from status when something is stopped, 1 on failure."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("action", choices=["run", "stop", "status"])
    parser.add_argument("--no-trigger", action="store_true", help="do not trigger the demo DAG")
    args = parser.parse_args(argv)
    launcher = make_launcher()
    try:
        if args.action == "run":
            launcher.run(trigger=not args.no_trigger)
        elif args.action == "stop":
            launcher.stop()
        else:
            return 0 if launcher.status() else 3
    except LaunchError as error:
        print(f"\n!! {error}", file=sys.stderr)
        return 1
    return 0
