"""The one connection factory: a connection id in, one cached MongoDB or Redis client out (Airflow-hook style).

Every MongoClient and redis client of Harvester is built here, so the client options (timeouts,
tz-aware datetimes, retries) are the same in the Airflow tasks, the triggerer, the workers, the
distributor and the CLI, and a source's ``output.connection_id`` means the same server everywhere.

How an id resolves, first answer wins:

1. resolvers registered with :func:`register_resolver` (inside Airflow, ``harvester.airflow``
   registers one that asks MongoHook / BaseHook, so the Airflow UI's connections apply);
2. the environment variable ``AIRFLOW_CONN_<ID>`` in Airflow's URI or JSON form (compose sets them);
3. the default: ``HARVESTER_MONGO_URI`` / ``HARVESTER_REDIS_URL`` (a plain pymongo / redis-py URL,
   ``rediss://`` and ``unix://`` included), so a bare machine and ``airflow dags test`` still run.

This package never imports Airflow: it is a leaf every component may use (`targets`: what an id points at;
`resolution`: how an id resolves; `clients`: building and caching the clients). Clients are cached per
process id (pymongo and redis pools do not survive a fork: a Celery prefork child makes its own).
"""

from harvester.connections.clients import (
    BLOCKING_MARGIN_SECONDS,
    MONGO_CLIENT_OPTIONS,
    MONGO_CONNECT_TIMEOUT_MS,
    MONGO_SOCKET_TIMEOUT_MS,
    REDIS_CLIENT_RETRIES,
    REDIS_CONNECT_TIMEOUT_SECONDS,
    REDIS_HEALTH_CHECK_SECONDS,
    REDIS_SOCKET_TIMEOUT_SECONDS,
    blocking_twin,
    celery_broker,
    clear_mongo_errors,
    close_clients,
    mongo_client,
    mongo_client_for,
    mongo_client_options,
    open_mongo_client,
    open_redis_client,
    open_sentinel_client,
    redis_client,
    redis_client_for,
    redis_client_options,
)
from harvester.connections.resolution import (
    ENVIRONMENT_PREFIX,
    MONGO_DEFAULT,
    REDIS_DEFAULT,
    ConnectionResolver,
    EnvironmentResolver,
    FieldsResolver,
    aresolve_mongo,
    aresolve_redis,
    register_resolver,
    registered_resolvers,
    resolve_filesystem,
    resolve_http,
    resolve_mongo,
    resolve_redis,
    unregister_resolver,
)
from harvester.connections.targets import (
    ConnectionFields,
    ConnectionTarget,
    HttpCredentials,
    MongoTarget,
    RedisTarget,
    format_sentinels,
    http_connection_origin,
    http_credentials_from_fields,
    mongo_target_from_fields,
    parse_sentinels,
    redact,
    redis_target_from_fields,
    sentinel_fields,
)
from harvester.errors import ConnectionNotFound, MongoUnavailableError

__all__ = [
    "BLOCKING_MARGIN_SECONDS", "ENVIRONMENT_PREFIX", "MONGO_CLIENT_OPTIONS", "MONGO_CONNECT_TIMEOUT_MS",
    "MONGO_DEFAULT", "MONGO_SOCKET_TIMEOUT_MS", "REDIS_CLIENT_RETRIES", "REDIS_CONNECT_TIMEOUT_SECONDS",
    "REDIS_DEFAULT", "REDIS_HEALTH_CHECK_SECONDS", "REDIS_SOCKET_TIMEOUT_SECONDS", "ConnectionFields",
    "ConnectionNotFound", "ConnectionResolver", "ConnectionTarget", "EnvironmentResolver", "FieldsResolver",
    "HttpCredentials", "MongoTarget", "MongoUnavailableError", "RedisTarget", "aresolve_mongo", "aresolve_redis",
    "blocking_twin", "celery_broker", "clear_mongo_errors", "close_clients", "format_sentinels",
    "http_connection_origin", "http_credentials_from_fields", "mongo_client", "mongo_client_for",
    "mongo_client_options", "mongo_target_from_fields", "open_mongo_client", "open_redis_client",
    "open_sentinel_client", "parse_sentinels", "redact", "redis_client", "redis_client_for", "redis_client_options",
    "redis_target_from_fields", "register_resolver", "registered_resolvers", "resolve_filesystem", "resolve_http",
    "resolve_mongo", "resolve_redis", "sentinel_fields", "unregister_resolver",
]
