"""Connection ids resolved by Airflow, plugged into :mod:`harvester.connections`.

Registered when ``harvester.airflow`` is imported (DAG files, operators, the trigger), so inside
Airflow an id means the connection of the Airflow UI / secrets backend / ``AIRFLOW_CONN_<ID>``, and
the factory stays the only place a client is built. MongoDB goes through MongoHook (its URI and
extras, exactly); Redis through ``BaseHook.get_connection`` read as RedisHook reads it (RedisHook
only hands out a ready client). In the triggerer the ``a``-methods use ``aget_connection``.
"""

from __future__ import annotations

from typing import Any

from harvester.connections import ConnectionFields, FieldsResolver, MongoTarget


def _is_not_found(error: Exception) -> bool:
    # AirflowNotFoundException lives in different modules across Airflow versions
    return type(error).__name__ == "AirflowNotFoundException"


def _fields(connection: Any) -> ConnectionFields:
    return ConnectionFields(
        conn_type=connection.conn_type or "", host=connection.host, port=connection.port, login=connection.login,
        password=connection.password, schema=connection.schema, extra=connection.extra_dejson,
    )


class AirflowConnectionResolver(FieldsResolver):
    """Ids from Airflow; None when Airflow has no such connection (the factory then falls back)."""

    def fields(self, connection_id: str) -> tuple[ConnectionFields, str] | None:
        """The connection's fields (``BaseHook.get_connection``), or None when Airflow has no such connection."""
        from airflow.sdk import BaseHook

        try:
            return _fields(BaseHook.get_connection(connection_id)), _via(connection_id)
        except Exception as error:  # only AirflowNotFoundException (no stable import path) means None; re-raised
            if _is_not_found(error):
                return None
            raise

    async def afields(self, connection_id: str) -> tuple[ConnectionFields, str] | None:
        """:meth:`fields` for the triggerer's event loop (``aget_connection``)."""
        from airflow.sdk import BaseHook

        try:
            return _fields(await BaseHook.aget_connection(connection_id)), _via(connection_id)
        except Exception as error:  # only AirflowNotFoundException (no stable import path) means None; re-raised
            if _is_not_found(error):
                return None
            raise

    def mongo(self, connection_id: str) -> MongoTarget | None:
        """Through MongoHook: its URI and the extras it passes to MongoClient, exactly."""
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

    def filesystem(self, location: str, connection_id: str | None) -> tuple[Any, str] | None:
        """Through Airflow's ``ObjectStoragePath``: the filesystem ``connection_id``'s credentials open (s3://,
        gs:// with the provider's connection), the same one an Airflow task's object storage uses. None (fsspec's
        own, as on a worker) without a connection, or for a scheme no installed provider registers."""
        if connection_id is None:
            return None
        from airflow.sdk import ObjectStoragePath

        try:
            path = ObjectStoragePath(location, conn_id=connection_id)
            return path.fs, path.path
        except ValueError:  # "No filesystem registered for scheme ...": not Airflow's to open
            return None


def _via(connection_id: str) -> str:
    return f"Airflow connection {connection_id}"
