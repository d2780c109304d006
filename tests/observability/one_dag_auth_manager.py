"""An Airflow auth manager for the plugin's access tests: Airflow's simple auth manager, plus users whose DAG
access is limited to the DAG ids named in ``HARVESTER_TEST_DAG_ACCESS`` (JSON: user -> DAG ids they may read).

It answers through the auth-manager interface Airflow's own routes and ``requires_access_dag`` use, as FAB's
per-DAG permissions or Keycloak would: the plugin sees nothing of how the manager decides.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


def _limits() -> dict[str, set[str]]:
    return {user: set(dags) for user, dags in json.loads(os.environ.get("HARVESTER_TEST_DAG_ACCESS", "{}")).items()}


class OneDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        limited = _limits().get(user.get_name())
        if limited is not None:
            dag_id = getattr(details, "id", None)
            return method == "GET" and dag_id in limited
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
