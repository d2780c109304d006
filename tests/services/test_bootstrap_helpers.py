"""The launcher's parts: port selection, PID files and process groups, readiness checks, MongoDB choice,
the supervisor that starts, waits for and stops services, and what the embedded stack declares."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from harvester.errors import LaunchError
from harvester.services import readiness
from harvester.services.cluster import ClusterPorts
from harvester.services.launcher import Service, Supervisor
from harvester.services.mongo import airflow_connection_uri, choose_mongo, redact
from harvester.services.pidfiles import PidFile, group_alive, signal_group, wait_group_gone
from harvester.services.ports import free_port, free_ports, is_port_free
from harvester.services.stack import LocalStack, StackPorts

pytestmark = pytest.mark.unit


def test_free_port_is_bindable_and_a_listening_port_is_not() -> None:
    port = free_port()
    assert is_port_free(port)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert not is_port_free(port)


def test_a_plan_of_free_ports_never_names_one_port_twice() -> None:
    """The kernel may hand a port that was just probed and closed to the next probe: a plan of 15 ports
    asked for one at a time repeated a port in CI. 400 plans of every launcher mode are all distinct."""
    for _ in range(200):
        for plan in (StackPorts.free(), ClusterPorts.free()):
            ports = list(vars(plan).values())
            assert len(set(ports)) == len(ports), plan


def test_free_ports_leave_out_ports_already_chosen_and_not_yet_listened_on() -> None:
    """Without ``besides`` about one in 500 of these sets held the port just probed. (Whether each port is still
    free when looked at again is not asked: beside the suite's other workers, one may be taken by then.)"""
    for _ in range(2000):
        chosen = free_port()
        ports = free_ports(20, besides=[chosen])
        assert chosen not in ports and len(set(ports)) == 20


def test_pid_file_round_trip_and_stale_file_removed(tmp_path: Path) -> None:
    pid_file = PidFile(tmp_path / "run" / "x.pid")
    assert pid_file.running_group() is None
    leader = subprocess.Popen(["sleep", "30"], process_group=0)
    pid_file.write(leader.pid)
    assert pid_file.running_group() == leader.pid
    leader.kill()
    leader.wait()
    assert pid_file.running_group() is None
    assert not pid_file.path.exists()


def test_a_group_runs_while_any_of_it_lives_and_stops_whole() -> None:
    parent = subprocess.Popen(["bash", "-c", "sleep 300 & wait"], process_group=0)
    assert group_alive(parent.pid)
    signal_group(parent.pid, signal.SIGKILL)  # the child sleep too, not only bash
    assert wait_group_gone(parent.pid, 5, reap=parent.poll)
    assert not group_alive(parent.pid)


def sleeper(name: str, env: dict[str, str], **options) -> Service:
    return Service(name, [["sleep", "300"]], env, **options)


def test_the_supervisor_starts_once_stops_leftovers_and_reports(tmp_path: Path, capsys) -> None:
    supervisor = Supervisor(tmp_path / "run", tmp_path / "log", cwd=tmp_path)
    env = {"PATH": os.environ["PATH"]}
    host = Service("host", [["sleep", "300"], ["sleep", "301"]], env)  # two commands, one process group
    supervisor.start_all([sleeper("one", env), host])
    group = supervisor.running("host")
    assert group is not None and supervisor.pid_file("host").read() == group
    supervisor.start_all([sleeper("one", env)])
    assert "one: already running" in capsys.readouterr().out
    assert supervisor.status([sleeper("one", env), host, sleeper("never", env)]) is False
    assert "never" in capsys.readouterr().out
    supervisor.stop([host])  # "one" is no longer declared: its PID file is a leftover, stopped too
    assert supervisor.running("one") is None and not group_alive(group)
    assert list((tmp_path / "run").glob("*.pid")) == []


def test_a_service_that_exits_or_never_answers_fails_the_start_with_its_log(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "run", tmp_path / "log", cwd=tmp_path)
    env = {"PATH": os.environ["PATH"]}
    with pytest.raises(LaunchError, match=r"(?s)step 'broken' failed: exited with code 3.*last lines.*no config"):
        supervisor.start_all([Service("broken", [["bash", "-c", "echo no config; exit 3"]], env,
                                      ready=lambda: False)])
    def refused() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(LaunchError, match=r"step 'mute' failed: not ready after 0s \(last error: refused\)"):
        supervisor.start_all([sleeper("mute", env, ready=refused, ready_timeout=0.3)])
    supervisor.stop([sleeper("mute", env)])


def test_a_taken_port_names_the_variable_that_moves_it(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "run", tmp_path / "log", cwd=tmp_path)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        service = sleeper("airflow", {}, port=port, port_variable=StackPorts.variable("airflow"))
        with pytest.raises(LaunchError, match=f"127.0.0.1:{port} is taken.*HARVESTER_RUN_AIRFLOW_PORT"):
            supervisor.start_all([service])
    assert supervisor.running("airflow") is None


def test_wait_until_names_the_service_and_last_error() -> None:
    def broken() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(readiness.ServiceNotReady, match=r"thing not ready after .*refused"):
        readiness.wait_until(broken, timeout=0.3, what="thing", interval=0.05)
    readiness.wait_until(lambda: True, timeout=1, what="ok")


def test_readiness_probes_say_no_for_a_closed_port() -> None:
    port = free_port()
    assert not readiness.tcp_open("127.0.0.1", port)
    assert not readiness.http_ok(f"http://127.0.0.1:{port}/")


def test_mongo_choice_order(tmp_path: Path) -> None:
    external = choose_mongo(1234, tmp_path, {"HARVESTER_MONGO_URI": "mongodb://u:secret@db:27017/", "PATH": ""})
    assert external.kind == "external" and external.command is None
    assert "secret" not in external.describe()

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    mongod = fake_bin / "mongod"
    mongod.write_text("#!/bin/sh\n")
    mongod.chmod(0o755)
    local = choose_mongo(1234, tmp_path, {"PATH": str(fake_bin)})
    assert local.kind == "mongod"
    assert local.command is not None and "--port" in local.command and "1234" in local.command

    stand_in = choose_mongo(1234, tmp_path, {"PATH": str(tmp_path / "empty")})
    assert stand_in.kind == "secantusdb"
    assert stand_in.uri.startswith("mongodb://127.0.0.1:1234")


def test_redact_hides_only_the_password() -> None:
    assert redact("mongodb://user:pw@host:1/db") == "mongodb://user:***@host:1/db"
    assert redact("mongodb://host:1/") == "mongodb://host:1/"


def test_stack_ports_move_with_environment_and_stay_on_loopback(tmp_path: Path) -> None:
    assert StackPorts.from_environment({"HARVESTER_RUN_AIRFLOW_PORT": "9090"}).airflow == 9090
    stack = LocalStack(root=tmp_path, environ={"PATH": "/usr/bin"})
    env = stack.environment()
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["HARVESTER_REDIS_URL"].startswith("redis://127.0.0.1:")
    names = [service.name for service in stack.services()]
    assert names[:2] == ["redis", "mongo"]
    assert {"worker-priority", "worker-default", "worker-pageslots", "airflow", "distributor"} <= set(names)
    pageslots = next(service.command for service in stack.services() if service.name == "worker-pageslots")
    assert pageslots[pageslots.index("-Q") + 1] == "pageslots"  # slot hosts consume host_page_slot tasks only
    assert pageslots[pageslots.index("--concurrency") + 1] == "2" and "--pool" not in pageslots  # prefork: 2 slots
    assert not any(name.startswith("proxy-") for name in names)  # no browser source in tmp_path: no proxy
    for service in stack.services():
        if service.port is not None:
            assert "0.0.0.0" not in " ".join(service.command)


def test_airflows_log_server_ports_move_with_the_environment_too(tmp_path: Path) -> None:
    """Under `make run` with every documented port moved, Airflow's scheduler and triggerer still bound their log
    servers on 8793 and 8794 ("address already in use": another checkout's Airflow had them)."""
    environ = {"PATH": "/usr/bin", "HARVESTER_RUN_WORKER_LOGS_PORT": "18593",
               "HARVESTER_RUN_TRIGGER_LOGS_PORT": "18594"}
    env = LocalStack(root=tmp_path, environ=environ).environment()
    assert env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == "18593"
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] == "18594"


def test_airflow_connection_uri_has_the_conn_type_mongo_hook_accepts() -> None:
    from airflow.models.connection import Connection

    local = Connection(uri=airflow_connection_uri("mongodb://127.0.0.1:27017/?directConnection=true"))
    assert (local.conn_type, local.host, local.port) == ("mongo", "127.0.0.1", 27017)
    assert str(local.extra_dejson["directConnection"]).lower() == "true"
    srv = Connection(uri=airflow_connection_uri("mongodb+srv://u:p@cluster.example.net/db"))
    assert srv.conn_type == "mongo" and str(srv.extra_dejson.get("srv")).lower() == "true" and srv.password == "p"


def test_the_environment_file_is_owner_only(tmp_path: Path) -> None:
    """var/run/harvester.env holds every password of the environment: nobody else may read it."""
    import stat

    stack = LocalStack(root=tmp_path, environ={"PATH": "/usr/bin"})
    stack.run_dir.mkdir(parents=True)
    path = stack.run_dir / "harvester.env"
    path.write_text("old\n")
    path.chmod(0o644)  # a file left by an older version, world-readable
    stack.write_environment_file({"HARVESTER_MONGO_URI": "mongodb://u:secret@127.0.0.1:1/x", "HOME": "/root"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == ('export HARVESTER_MONGO_URI="mongodb://u:secret@127.0.0.1:1/x"\n'
                                f'export PATH="{stack.bin}:$PATH"\n')
    path.unlink()
    stack.write_environment_file({"HARVESTER_X": "1"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_sourcing_the_environment_file_puts_the_harvester_command_on_path(tmp_path: Path) -> None:
    """The README shows `harvester ...` bare after `source var/run/harvester.env`, so that must work."""
    import subprocess

    stack = LocalStack(root=tmp_path, environ={"PATH": "/usr/bin:/bin"})
    stack.run_dir.mkdir(parents=True)
    stack.write_environment_file({"HARVESTER_REDIS_URL": "redis://127.0.0.1:1/0"})
    found = subprocess.run(["bash", "-c", f"source {stack.run_dir / 'harvester.env'} && command -v harvester "
                            "&& command -v airflow && echo $HARVESTER_REDIS_URL"],
                           env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
    assert found.stdout.split() == [str(stack.bin / "harvester"), str(stack.bin / "airflow"), "redis://127.0.0.1:1/0"]
