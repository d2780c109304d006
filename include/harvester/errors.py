"""Every exception Harvester raises on purpose, in one hierarchy under :class:`HarvesterError`.

Backend exceptions are wrapped where Harvester talks to the backend (the ``limits`` library's
``StorageError`` is the model): a ``redis.RedisError`` out of the distributor's stores and a
``pymongo.errors.PyMongoError`` out of ``harvester.storage`` leave as a :class:`StorageError`
(:class:`StorageUnavailableError` when the server could not be reached or did not answer in time),
with the original as ``__cause__`` and :attr:`StorageError.backend_error`. Callers catch those,
not the client library's classes.

The wrapped exception is also an instance of the backend's class it came from (a ``RedisError``, a
``redis.ConnectionError``, a ``PyMongoError``, a ``ConnectionFailure``), so code written against the
backend's classes keeps working. Those classes are made the first time a backend error is wrapped:
this module imports neither redis nor pymongo, because the DAG file's parse imports it (config errors)
and must not pay for either client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from functools import cache
from typing import Protocol

__all__ = [
    "MONGO_DUPLICATE_KEY",
    "AddressRefused",
    "ArchiveUnavailable",
    "BodyRefused",
    "ClusterError",
    "CoercionError",
    "ConfigError",
    "ConnectionNotFound",
    "DistributorError",
    "ExportUnavailable",
    "HarvesterError",
    "HostRateTimeout",
    "InvalidSourceFiles",
    "LaunchError",
    "MongoUnavailableError",
    "PageSlotError",
    "RobotsDisallowed",
    "RobotsUnavailable",
    "ScrapingError",
    "ServiceNotReady",
    "ShutdownRequested",
    "SlotEnded",
    "SlotTransitionRefused",
    "SourceConfigError",
    "SourceNotRegistered",
    "StorageError",
    "StorageUnavailableError",
    "TaskNoLongerHeld",
    "TooManyRedirects",
    "TransportFailure",
    "UnknownSource",
    "mongo_storage_errors",
    "redis_storage_errors",
]


class HarvesterError(Exception):
    """The base of every error Harvester raises on purpose."""


# -- configuration ---------------------------------------------------------------------------------
class Problem(Protocol):
    """What a config error needs of one problem (``harvester.config.loader.Problem`` is the real one)."""

    @property
    def file(self) -> str: ...

    @property
    def line(self) -> int: ...

    @property
    def field(self) -> str: ...

    @property
    def reason(self) -> str: ...


class ConfigError(HarvesterError):
    """A source file or setting Harvester cannot use."""


class SourceConfigError(ConfigError, ValueError):
    """A source file that cannot be used; ``problems`` lists every reason, each with its line."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        if not self.problems:
            raise ValueError("a SourceConfigError needs at least one problem")
        super().__init__("\n".join(str(problem) for problem in self.problems))

    @property
    def file(self) -> str:
        return self.problems[0].file

    @property
    def line(self) -> int:
        return self.problems[0].line

    @property
    def field(self) -> str:
        return self.problems[0].field

    @property
    def reason(self) -> str:
        return self.problems[0].reason


class InvalidSourceFiles(ConfigError, ValueError):
    """The source files that did not load, one ``file:line: field: reason`` line per problem."""


class ConnectionNotFound(ConfigError, LookupError):
    """No resolver knows the connection id and there is no default to fall back to."""


# -- scraping --------------------------------------------------------------------------------------
class ScrapingError(HarvesterError):
    """A page or a value in it that Harvester cannot turn into a record."""


class CoercionError(ScrapingError, ValueError):
    """A value is present but not of the attribute's type."""


class BodyRefused(ScrapingError):
    """A body we will not decode (stacked, unknown or corrupt encoding); the message is the reason."""


class RobotsDisallowed(ScrapingError):
    """robots.txt forbids the URL; the message names the origin."""


class RobotsUnavailable(ScrapingError):
    """robots.txt answered 429 or 5xx, or could not be fetched, and no good copy is at hand: RFC 9309 reads that
    as complete disallow, so nothing is fetched and the task is retried later; the message says why."""


class AddressRefused(ScrapingError):
    """A URL the crawl must not fetch; the message is the reason recorded with the dead letter."""


class HostRateTimeout(ScrapingError):
    """No request slot on the host within the wait allowed: the task is retried later."""


class TaskNoLongerHeld(ScrapingError):
    """The task's lease went to another worker before one of its requests could start (no token taken)."""


class TooManyRedirects(ScrapingError):
    """More redirect hops than ``max_redirects`` (a loop, most likely)."""


class TransportFailure(ScrapingError):
    """A request that failed below HTTP (connection, protocol, URL), whatever HTTP library sent it.

    ``outcome`` is the fetch outcome it becomes (``connection_error``, ``parse_error``, ``decode_error``,
    ``timeout``); the message is the reason recorded with the page."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome


# -- storage ---------------------------------------------------------------------------------------
class StorageError(HarvesterError):
    """A storage backend (Redis, MongoDB) failed; the backend's own exception is ``__cause__``."""

    @property
    def backend_error(self) -> BaseException | None:
        """The exception of the client library (redis-py, pymongo) this one wraps."""
        return self.__cause__


class ExportUnavailable(StorageError):
    """An export format whose library is not installed (pyarrow for Parquet)."""


class ArchiveUnavailable(StorageError):
    """The WARC archive could not be written (its storage failed, filled or did not answer in time): the batch's
    records are still stored and the gap counted, unless the source's ``output.archive.required`` retries it."""


class StorageUnavailableError(StorageError):
    """The backend could not be reached or did not answer in time: worth retrying later."""


class MongoUnavailableError(StorageUnavailableError, RuntimeError):
    """MongoDB could not be reached; the message is the one line an operator needs (password hidden)."""


@cache
def _redis_error_classes() -> tuple[type[StorageError], type[StorageError]]:
    """(StorageError, StorageUnavailableError) subclasses that are also redis-py's RedisError/ConnectionError."""
    import redis

    class RedisStorageError(StorageError, redis.RedisError):
        """A Redis command failed."""

    class RedisUnavailableError(RedisStorageError, StorageUnavailableError, redis.ConnectionError):
        """Redis could not be reached or did not answer in time."""

    return RedisStorageError, RedisUnavailableError


@cache
def _mongo_error_classes() -> tuple[type[StorageError], type[StorageError]]:
    """(StorageError, StorageUnavailableError) subclasses that are also pymongo's PyMongoError/ConnectionFailure."""
    from pymongo.errors import ConnectionFailure, PyMongoError

    class MongoStorageError(StorageError, PyMongoError):
        """A MongoDB operation failed."""

    class MongoStorageUnavailableError(MongoStorageError, StorageUnavailableError, ConnectionFailure):
        """MongoDB could not be reached, or a network operation timed out."""

    return MongoStorageError, MongoStorageUnavailableError


@contextlib.contextmanager
def redis_storage_errors() -> Iterator[None]:
    """Re-raise a redis-py error as a :class:`StorageError` (use as a context manager or a decorator)."""
    import redis

    try:
        yield
    except StorageError:
        raise
    except redis.RedisError as error:
        failed, unavailable = _redis_error_classes()
        unreachable = isinstance(error, (redis.ConnectionError, redis.TimeoutError))
        raise (unavailable if unreachable else failed)(str(error)) from error


MONGO_DUPLICATE_KEY = 11000  # MongoDB's write-error code of a unique index refusing a document


@contextlib.contextmanager
def mongo_storage_errors() -> Iterator[None]:
    """Re-raise a pymongo error as a :class:`StorageError` (use as a context manager or a decorator)."""
    from pymongo.errors import ConnectionFailure, PyMongoError

    try:
        yield
    except StorageError:
        raise
    except PyMongoError as error:
        failed, unavailable = _mongo_error_classes()
        raise (unavailable if isinstance(error, ConnectionFailure) else failed)(str(error)) from error


# -- page slots ------------------------------------------------------------------------------------
class PageSlotError(HarvesterError):
    """A page slot cannot go on as asked."""


class SlotEnded(PageSlotError):
    """The slot left its page (idle, ordered, blocked, gave up, lost, stopping): the process stops hosting."""


class SlotTransitionRefused(PageSlotError):
    """Redis refused a slot change (illegal transition, another owner, not idle, gone)."""

    def __init__(self, slot_id: str, status: str, state: str, target: str) -> None:
        super().__init__(f"slot {slot_id}: {state or 'missing'} -> {target} refused ({status})")
        self.slot_id, self.status, self.state, self.target = slot_id, status, state, target


# -- observability ---------------------------------------------------------------------------------
class UnknownSource(HarvesterError, LookupError):
    """No source of that name (neither a YAML file nor registered in Redis)."""


# -- distributor and services ----------------------------------------------------------------------
class DistributorError(HarvesterError):
    """Raised by the distributor's own control flow."""


class ShutdownRequested(DistributorError):
    """SIGTERM arrived while the distributor was blocked waiting for work."""


class SourceNotRegistered(DistributorError, LookupError):
    """A task names a source whose validated config is not registered in Redis (its producer registers it)."""

    def __init__(self, source: str, reason: str = "the next run of its producer registers it") -> None:
        super().__init__(f"source {source!r} is not registered ({reason})")
        self.source = source


class ServiceNotReady(HarvesterError, RuntimeError):
    """A service did not answer within its deadline."""


class LaunchError(HarvesterError, RuntimeError):
    """A service of `make run` (either mode) did not start; the message names it and ends with its log's
    last lines."""


class ClusterError(LaunchError):
    """A step of the cluster did not start; the message names it and ends with its log's last lines."""
