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
        except Exception as error:  # only AirflowNotFoundException (no stable import path) means None; re-raised
            if _is_not_found(error):
                return None
            raise
        options = dict(hook.extras)  # what MongoHook.get_conn passes to MongoClient
        if hook.allow_insecure:
            options["tlsAllowInvalidCertificates"] = True
        return MongoTarget(connection_id, hook.uri, _via(connection_id), options)

    def redis(self, connection_id: str) -> RedisTarget | None:
        fields = _connection_fields(connection_id)
        return None if fields is None else redis_target_from_fields(connection_id, fields, _via(connection_id))

    def http(self, connection_id: str) -> HttpCredentials | None:
        """An HTTP connection (a source's ``http_connection_id``) read as HttpHook reads it."""
        fields = _connection_fields(connection_id)
        return None if fields is None else http_credentials_from_fields(connection_id, fields, _via(connection_id))

    async def amongo(self, connection_id: str) -> MongoTarget | None:
        fields = await _aconnection_fields(connection_id)
        return None if fields is None else mongo_target_from_fields(connection_id, fields, _via(connection_id))

    async def aredis(self, connection_id: str) -> RedisTarget | None:
        fields = await _aconnection_fields(connection_id)
        return None if fields is None else redis_target_from_fields(connection_id, fields, _via(connection_id))


def _via(connection_id: str) -> str:
    return f"Airflow connection {connection_id}"


def _connection_fields(connection_id: str) -> ConnectionFields | None:
    """The connection's fields, or None when Airflow has no connection of that id."""
    from airflow.sdk import BaseHook

    try:
        return _fields(BaseHook.get_connection(connection_id))
    except Exception as error:  # only AirflowNotFoundException (no stable import path) means None; re-raised
        if _is_not_found(error):
            return None
        raise


async def _aconnection_fields(connection_id: str) -> ConnectionFields | None:
    """:func:`_connection_fields` for the triggerer's event loop (``aget_connection``)."""
    from airflow.sdk import BaseHook

    try:
        return _fields(await BaseHook.aget_connection(connection_id))
    except Exception as error:  # only AirflowNotFoundException (no stable import path) means None; re-raised
        if _is_not_found(error):
            return None
        raise
