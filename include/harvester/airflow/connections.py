"""Connection ids resolved by Airflow, plugged into :mod:`harvester.connections`.

Registered when ``harvester.airflow`` is imported (DAG files, operators, the trigger), so inside
Airflow an id means the connection of the Airflow UI / secrets backend / ``AIRFLOW_CONN_<ID>``, and
the factory stays the only place a client is built. MongoDB goes through MongoHook (its URI and
extras, exactly); Redis through ``BaseHook.get_connection`` read as RedisHook reads it (RedisHook
only hands out a ready client). In the triggerer the ``a``-methods use ``aget_connection``.
"""

from __future__ import annotations

from typing import Any

from harvester.connections import (
    ConnectionFields,
    HttpCredentials,
    MongoTarget,
    RedisTarget,
    http_credentials_from_fields,
    mongo_target_from_fields,
    redis_target_from_fields,
)


def _is_not_found(error: Exception) -> bool:
    # AirflowNotFoundException lives in different modules across Airflow versions
    return type(error).__name__ == "AirflowNotFoundException"


def _fields(connection: Any) -> ConnectionFields:
    return ConnectionFields(
        conn_type=connection.conn_type or "", host=connection.host, port=connection.port, login=connection.login,
        password=connection.password, schema=connection.schema, extra=connection.extra_dejson,
    )


class AirflowConnectionResolver:
    """Ids from Airflow; None when Airflow has no such connection (the factory then falls back)."""

    def mongo(self, connection_id: str) -> MongoTarget | None:
        from airflow.providers.mongo.hooks.mongo import MongoHook

        try:
            hook = MongoHook(mongo_conn_id=connection_id)
        except Exception as error:
            if _is_not_found(error):
                return None
            raise
        options = dict(hook.extras)  # what MongoHook.get_conn passes to MongoClient
        if hook.allow_insecure:
            options["tlsAllowInvalidCertificates"] = True
        return MongoTarget(connection_id, hook.uri, f"Airflow connection {connection_id}", options)

    def redis(self, connection_id: str) -> RedisTarget | None:
        from airflow.sdk import BaseHook

        try:
            connection = BaseHook.get_connection(connection_id)
        except Exception as error:
            if _is_not_found(error):
                return None
            raise
        return redis_target_from_fields(connection_id, _fields(connection), f"Airflow connection {connection_id}")

    def http(self, connection_id: str) -> HttpCredentials | None:
        """An HTTP connection (a source's ``http_connection_id``) read as HttpHook reads it."""
        from airflow.sdk import BaseHook

        try:
            connection = BaseHook.get_connection(connection_id)
        except Exception as error:
            if _is_not_found(error):
                return None
            raise
        return http_credentials_from_fields(connection_id, _fields(connection), f"Airflow connection {connection_id}")

    async def amongo(self, connection_id: str) -> MongoTarget | None:
        from airflow.sdk import BaseHook

        try:
            connection = await BaseHook.aget_connection(connection_id)
        except Exception as error:
            if _is_not_found(error):
                return None
            raise
        return mongo_target_from_fields(connection_id, _fields(connection), f"Airflow connection {connection_id}")

    async def aredis(self, connection_id: str) -> RedisTarget | None:
        from airflow.sdk import BaseHook

        try:
            connection = await BaseHook.aget_connection(connection_id)
        except Exception as error:
            if _is_not_found(error):
                return None
            raise
        return redis_target_from_fields(connection_id, _fields(connection), f"Airflow connection {connection_id}")
