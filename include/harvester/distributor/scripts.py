"""The Lua scripts of the rate-limit store, read from ``lua/*.lua`` and registered once per Redis client.

Every script is prefixed with ``lua/common.lua`` (shared helpers). Single calls go through redis-py's
:class:`~redis.commands.core.Script` (EVALSHA, loading on NOSCRIPT); pipelines use :func:`run_pipeline`,
which sends plain EVALSHA and reloads the scripts once if Redis forgot them (after a restart), so a
pipelined call stays one round trip instead of redis-py's extra SCRIPT EXISTS.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

LUA_DIRECTORY = Path(__file__).with_name("lua")
SCRIPT_NAMES = ("admit", "heartbeat", "release", "fail", "reap", "pause", "stats", "requeue_dead")


@cache
def script_source(name: str) -> str:
    """The full text of one script: the shared helpers, then the script itself."""
    common = (LUA_DIRECTORY / "common.lua").read_text()
    return f"{common}\n{(LUA_DIRECTORY / f'{name}.lua').read_text()}"


class Scripts:
    """The registered scripts of one Redis client, by name."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.by_name: dict[str, Script] = {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}

    def __getitem__(self, name: str) -> Script:
        return self.by_name[name]

    def load_all(self) -> None:
        for script in self.by_name.values():
            script.sha = self.client.script_load(script.script)

    def run_pipeline(self, build: Callable[[redis.client.Pipeline], None]) -> list[Any]:
        """Run ``build``'s commands in one non-transactional pipeline; reload the scripts once on NOSCRIPT."""
        for attempt in (1, 2):
            pipeline = self.client.pipeline(transaction=False)
            build(pipeline)
            try:
                return pipeline.execute()
            except NoScriptError:
                if attempt == 2:
                    raise
                self.load_all()
            finally:
                pipeline.reset()
        raise AssertionError("unreachable")

    def evalsha(self, pipeline: redis.client.Pipeline, name: str, keys: list[str], args: list[Any]) -> None:
        """Queue one script call on a pipeline (plain EVALSHA: no SCRIPT EXISTS round trip)."""
        pipeline.evalsha(self.by_name[name].sha, len(keys), *keys, *args)
