"""`harvester health distributor`: the liveness check docker compose runs, against a real distributor and Redis."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from harvester.redis_keys import distributor_heartbeat
from harvester.services import readiness
from harvester.settings import REPOSITORY_ROOT

from tests.distributor.helpers import start_distributor, stop

pytestmark = pytest.mark.integration


def health(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harvester.cli", "health", "distributor", *args], env=env,
                          cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=60)


def test_health_is_ok_while_the_distributor_runs_and_fails_once_its_heartbeat_is_stale(
        distributor_env: dict[str, str], redis_client: redis.Redis, tmp_path: Path) -> None:
    assert health(distributor_env, "--name", "dist-a").returncode == 1  # nothing has ever beaten
    log = (tmp_path / "distributor.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "harvester.cli", "distributor", "--name", "dist-a"], env=distributor_env,
        cwd=REPOSITORY_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    try:
        readiness.wait_until(lambda: redis_client.exists(distributor_heartbeat("dist-a")) == 1, 30, "heartbeat")
        alive = health(distributor_env, "--name", "dist-a")
        assert alive.returncode == 0, alive.stderr
        assert "alive" in alive.stdout
        # another name is another distributor: its absence is reported, not hidden by dist-a's beat
        assert health(distributor_env, "--name", "dist-b").returncode == 1
    finally:
        assert stop(process) == 0
    time.sleep(1.5)
    stale = health(distributor_env, "--name", "dist-a", "--max-age", "1")
    assert stale.returncode == 1 and "old" in stale.stderr, stale.stderr


def test_a_distributor_waiting_idle_still_beats(distributor_env: dict[str, str], redis_client: redis.Redis,
                                                tmp_path: Path) -> None:
    """With no intake it blocks in BLPOP; each wake-up (at most every 30 s, here every reap) beats again."""
    process = start_distributor(distributor_env, tmp_path / "idle.log")
    try:
        key = distributor_heartbeat(socket.gethostname())
        readiness.wait_until(lambda: redis_client.exists(key) == 1, 30, "first heartbeat")
        first = float(redis_client.get(key))
        readiness.wait_until(lambda: float(redis_client.get(key) or 0) > first, 30, "a later heartbeat")
        assert health(distributor_env, "--max-age", "20").returncode == 0
    finally:
        stop(process)


def test_health_fails_when_redis_is_unreachable(distributor_env: dict[str, str]) -> None:
    from harvester.services.ports import free_port

    env = {**distributor_env, "HARVESTER_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    result = health(env)
    assert result.returncode == 1 and "unreachable" in result.stderr
