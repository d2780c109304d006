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


def run_failure(client: Any, dag_id: str, run_id: str, prefix: str = "", lines: int = 40) -> str:
    """Why a run did not succeed, as its task instances tell it: each one's state, and the last ``lines``
    lines of every failed one's log (what a test prints when a run it waited for failed)."""
    import json

    path = f"{prefix}/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    instances = _json(client, path).get("task_instances", [])
    parts = [f"{dag_id} {run_id}: " + ", ".join(f"{ti['task_id']}={ti['state']}" for ti in instances)]
    for instance in instances:
        if instance.get("state") not in ("failed", "upstream_failed", "up_for_retry"):
            continue
        try_number = max(1, int(instance.get("try_number") or 1))
        try:
            logs = client.get(f"{path}/{instance['task_id']}/logs/{try_number}", params={"full_content": "true"},
                              headers={"Accept": "application/json"}).json()
        except Exception as error:  # a diagnosis: what could not be read is said, never raised
            logs = {"content": f"(its log could not be read: {type(error).__name__}: {error})"}
        content = logs.get("content", "")
        text = "\n".join(json.dumps(entry) if not isinstance(entry, str) else entry for entry in content) \
            if isinstance(content, list) else str(content)
        parts.append(f"--- {instance['task_id']} try {try_number}:\n" + "\n".join(text.splitlines()[-lines:]))
    return "\n".join(parts)
