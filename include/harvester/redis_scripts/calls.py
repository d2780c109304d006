"""Calling scripts: plain EVALSHA in one non-transactional pipeline, replies decoded by their contracts.

redis-py's ``Script`` object sends SCRIPT EXISTS (or a failing EVALSHA, then EVAL) per call; here every
call of a pipeline is one EVALSHA, so a pipelined call stays one round trip. A script Redis does not
know yet (its first call on this server, or after a restart or a SCRIPT FLUSH) answers NOSCRIPT and
runs nothing; then the scripts of the pipeline are loaded (registered once per server) and only the
calls that answered NOSCRIPT are sent again, in their order: the plain commands of the pipeline never
run twice. A :class:`Scripts` holds the scripts ONE caller uses (a component's ``CONTRACTS``, or the one
contract a caller needs); several may share a pipeline.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import redis
from redis.exceptions import NoScriptError, ResponseError

from harvester.redis_scripts.contracts import ScriptContract

__all__ = ["ScriptPipeline", "Scripts"]


class ScriptPipeline:
    """One pipeline being built: script calls by name (their replies come back decoded) and plain commands."""

    def __init__(self, scripts: Scripts, pipeline: redis.client.Pipeline) -> None:
        self.scripts = scripts  # whose scripts ``call`` names
        self.pipeline = pipeline  # for plain commands (LPUSH, LTRIM, ...) between the script calls
        self.contracts: dict[int, ScriptContract] = {}  # command position -> contract of its reply
        self.calls: dict[int, tuple[Any, ...]] = {}  # command position -> EVALSHA arguments (sent again on NOSCRIPT)
        self.used: dict[int, Scripts] = {}  # every Scripts with a call here (loaded on NOSCRIPT)

    def call(self, name: str, keys_of: str | object, keys: Mapping[str, str] | None = None, /,
             **arguments: Any) -> None:
        """Queue script ``name`` of this pipeline's :class:`Scripts` on ``keys_of``'s keys, ARGV by name."""
        self.scripts.queue(self, name, keys_of, keys, **arguments)

    def queue_contract(self, scripts: Scripts, contract: ScriptContract, key_names: list[str],
                       argument_values: list[Any]) -> None:
        position = len(self.pipeline.command_stack)
        self.contracts[position] = contract
        self.calls[position] = (contract.sha, len(key_names), *key_names, *argument_values)
        self.used[id(scripts)] = scripts
        self.pipeline.evalsha(*self.calls[position])

    def decode(self, replies: list[Any]) -> list[Any]:
        return [self.contracts[i].decode(reply) if i in self.contracts else reply for i, reply in enumerate(replies)]


class Scripts:
    """Scripts of one Redis client, by name: a component's ``CONTRACTS`` or just the one a caller needs.

    Building one costs nothing on the server (each contract knows its SHA1); the scripts are loaded
    into Redis the first time a call finds them missing.
    """

    def __init__(self, client: redis.Redis, contracts: Mapping[str, ScriptContract] | Iterable[ScriptContract],
                 own_connection: bool = False) -> None:
        self.client = client
        self.contracts: dict[str, ScriptContract] = (
            dict(contracts) if isinstance(contracts, Mapping) else {contract.name: contract for contract in contracts})
        # call_alone on a connection of this set's own (see _send): for a caller that calls often
        self.own_connection = own_connection
        self._connection: Any = None
        self._connection_pid = 0
        self._connection_lock = threading.Lock()

    def load_all(self) -> None:
        """SCRIPT LOAD every script of this set (Redis did not know them: a first use, a restart, a flush)."""
        pipeline = self.client.pipeline(transaction=False)
        for contract in self.contracts.values():
            pipeline.script_load(contract.source)
        pipeline.execute()

    def queue(self, pipeline: ScriptPipeline, name: str, keys_of: str | object,
              keys: Mapping[str, str] | None = None, /, **arguments: Any) -> None:
        """Queue script ``name`` on a pipeline (perhaps one another :class:`Scripts` runs)."""
        contract = self.contracts[name]
        pipeline.queue_contract(self, contract, contract.key_names(keys_of, keys), contract.argument_values(arguments))

    def run_pipeline(self, build: Callable[[ScriptPipeline], None]) -> list[Any]:
        """Run ``build``'s calls in one non-transactional pipeline (and, when Redis did not know some
        scripts, load them and send those calls again). Returns every reply in order, those of script calls
        decoded into their named tuples; raises the first error a command answered."""
        pipeline = ScriptPipeline(self, self.client.pipeline(transaction=False))
        build(pipeline)
        try:
            replies = pipeline.pipeline.execute(raise_on_error=False)
        finally:
            pipeline.pipeline.reset()
        unknown = [position for position, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if unknown:
            for scripts in pipeline.used.values():
                scripts.load_all()
            again = self.client.pipeline(transaction=False)
            for position in unknown:
                again.evalsha(*pipeline.calls[position])
            try:
                for position, reply in zip(unknown, again.execute(raise_on_error=False), strict=True):
                    replies[position] = reply
            finally:
                again.reset()
        error = next((reply for reply in replies if isinstance(reply, Exception)), None)
        if error is not None:
            raise error
        return pipeline.decode(replies)

    def call_alone(self, name: str, keys_of: str | object, keys: Mapping[str, str] | None = None, /,
                   **arguments: Any) -> Any:
        """One script call as a plain EVALSHA, no pipeline (loaded and sent again on NOSCRIPT); its decoded reply.
        For a caller that runs nothing beside it, often: the pipeline's set-up cost the archive's payload filter
        a quarter of its CPU (25 of 110 µs a call, measured 2026-12-06)."""
        contract = self.contracts[name]
        call = ("EVALSHA", contract.sha, len(contract.keys), *contract.key_names(keys_of, keys),
                *contract.argument_values(arguments))
        try:
            reply = self._send(call)
        except NoScriptError:
            self.load_all()
            reply = self._send(call)
        return contract.decode(reply)

    def _send(self, command: tuple[Any, ...]) -> Any:
        """One command through the client, or (``own_connection``) on a connection this set keeps out of the
        client's pool: the pool's checkout and release, its retry wrapper and their metrics hooks were about 40 of
        a call's 90 µs of CPU (the archive's payload filter calls once a batch; measured 2026-12-06). The
        connection is the pool's kind (TLS, a Sentinel's master), made again in a forked child, and dropped on
        any failure but an error reply (the next call connects again); its calls are serialised."""
        if not self.own_connection:
            return self.client.execute_command(*command)
        with self._connection_lock:
            if self._connection is None or self._connection_pid != os.getpid():
                self._connection = self.client.connection_pool.make_connection()
                self._connection_pid = os.getpid()
            connection = self._connection
            try:
                connection.send_command(*command)
                return connection.read_response()
            except ResponseError:  # an error reply (NOSCRIPT, a script's error): the connection is still sound
                raise
            except BaseException:  # a broken socket, a timeout, an interrupted read: its state is unknown
                connection.disconnect()
                raise

    def close(self) -> None:
        """Drop the connection of this set's own, if any (the client's pool is the client's)."""
        with self._connection_lock:
            if self._connection is not None and self._connection_pid == os.getpid():
                self._connection.disconnect()
            self._connection = None

    def call(self, name: str, keys_of: str | object, keys: Mapping[str, str] | None = None, /,
             **arguments: Any) -> Any:
        """One script call in its own round trip; its decoded reply."""
        return self.run_pipeline(lambda pipeline: pipeline.call(name, keys_of, keys, **arguments))[0]
