"""Airflow's REST API (/api/v2) as a user calls it, logged in: how the cluster mode triggers the demo DAG
and how the topology test drives and reads its runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harvester.errors import ClusterError


@dataclass(frozen=True)
class AirflowApi:
    """The API server at ``url`` with the simple auth manager's ``username`` and ``password``."""

    url: str
    username: str
    password: str
    explain: Callable[[], str] | None = None  # what to add to an error (a log's last lines)

    def client(self, attempts: int = 3) -> Any:
        """An httpx client of /api/v2 with a JWT from /auth/token (the caller closes it). A token request that
        times out is asked again: a busy API server answers late, which is not a refusal."""
        import httpx

        for attempt in range(1, attempts + 1):
            try:
                response = httpx.post(f"{self.url}/auth/token", timeout=30,
                                      json={"username": self.username, "password": self.password})
                break
            except httpx.TimeoutException:
                if attempt == attempts:
                    raise
        response.raise_for_status()
        token = response.json()["access_token"]
        return httpx.Client(base_url=f"{self.url}/api/v2", timeout=30, headers={"Authorization": f"Bearer {token}"})

    def trigger(self, dag_id: str, parse_timeout: float = 240.0) -> str:
        """Wait until the DAG is parsed, then start a run; returns its run id."""
        with self.client() as client:
            deadline = time.monotonic() + parse_timeout
            while _status(client, f"/dags/{dag_id}") != 200:
                if time.monotonic() > deadline:
                    raise ClusterError(f"{dag_id} was never parsed" + (f"\n{self.explain()}" if self.explain else ""))
                time.sleep(1)
            response = client.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
            if response.status_code not in (200, 201):
                raise ClusterError(f"triggering {dag_id} failed: {response.status_code} {response.text}")
            return str(response.json()["dag_run_id"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0) -> dict[str, Any]:
        """The run once it has ended (success or failed), with the states of its task instances."""
        with self.client() as client:
            deadline = time.monotonic() + timeout
            while True:
                run = _json(client, f"/dags/{dag_id}/dagRuns/{run_id}")
                if run.get("state") in ("success", "failed") or time.monotonic() > deadline:
                    instances = client.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances").json()
                    run["task_states"] = {ti["task_id"]: ti["state"] for ti in instances.get("task_instances", [])}
                    return run
                time.sleep(2)


def _status(client: Any, path: str) -> int | None:
    """A poll's status code; None when the API server did not answer in time (the caller's deadline decides)."""
    import httpx

    try:
        return int(client.get(path).status_code)
    except httpx.TimeoutException:
        return None


def _json(client: Any, path: str) -> dict[str, Any]:
    """A poll's JSON body; empty when the API server did not answer in time (the caller polls again)."""
    import httpx

    try:
        return dict(client.get(path).json())
    except httpx.TimeoutException:
        return {}
