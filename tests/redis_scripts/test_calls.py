"""The Redis-script platform against a real Redis: a pipeline is one round trip of EVALSHA, a script Redis
does not know is loaded and only its calls are sent again, and two components' scripts share a pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from harvester.distributor.scripts import CONTRACTS as DISTRIBUTOR_CONTRACTS
from harvester.pageslots.scripts import CONTRACTS as PAGE_SLOT_CONTRACTS
from harvester.redis_keys import PageSlotKeys, SourceKeys
from harvester.redis_scripts import Scripts, declare_script, text

pytestmark = pytest.mark.integration


def test_a_script_redis_forgot_is_loaded_and_only_its_call_runs_again(redis_client: redis.Redis) -> None:
    scripts = Scripts(redis_client, DISTRIBUTOR_CONTRACTS)
    redis_client.script_flush()
    keys = SourceKeys("shop")

    def build(pipeline) -> None:  # a plain command around a script call the server has never seen
        pipeline.pipeline.rpush("probe", "before")
        pipeline.call("pause", "shop", {"paused": keys.paused_until}, seconds=30.0, now="100", host="")
        pipeline.pipeline.rpush("probe", "after")

    before, reply, after = scripts.run_pipeline(build)
    assert (before, after) == (1, 2) and reply.paused_until == 130.0  # decoded by the contract
    assert [text(item) for item in redis_client.lrange("probe", 0, -1)] == ["before", "after"]  # never twice
    assert redis_client.script_exists(DISTRIBUTOR_CONTRACTS["pause"].sha) == [True]


def test_a_call_alone_is_one_evalsha_and_loads_a_script_redis_forgot(redis_client: redis.Redis) -> None:
    scripts = Scripts(redis_client, DISTRIBUTOR_CONTRACTS)
    redis_client.script_flush()
    reply = scripts.call_alone("pause", "shop", {"paused": SourceKeys("shop").paused_until}, seconds=30.0, now="100",
                               host="")
    assert reply.paused_until == 130.0 and redis_client.script_exists(DISTRIBUTOR_CONTRACTS["pause"].sha) == [True]
    again = scripts.call_alone("pause", "shop", {"paused": SourceKeys("shop").paused_until}, seconds=60.0, now="100",
                               host="")
    assert again.paused_until == 160.0  # the script known now: one EVALSHA
    with pytest.raises(TypeError):
        scripts.call_alone("pause", "shop", {"paused": SourceKeys("shop").paused_until}, seconds=1.0)  # ARGV by name


def test_calls_alone_on_a_connection_of_their_own_survive_a_forgotten_script_a_killed_connection_and_a_fork(
        redis_client: redis.Redis) -> None:
    import os

    scripts = Scripts(redis_client, DISTRIBUTOR_CONTRACTS, own_connection=True)
    keys = {"paused": SourceKeys("shop").paused_until}

    def pause(seconds: float) -> float:
        return scripts.call_alone("pause", "shop", keys, seconds=seconds, now="100", host="").paused_until

    redis_client.script_flush()
    assert pause(30.0) == 130.0  # NOSCRIPT on its own connection: loaded, sent again
    connection = scripts._connection  # one connection, kept out of the pool
    connection.send_command("CLIENT", "ID")
    assert redis_client.client_kill_filter(_id=connection.read_response()) == 1
    with pytest.raises(redis.ConnectionError):  # the server closed it: the next call fails (the caller's to
        pause(40.0)  # handle), the one after connects again
    assert pause(50.0) == 150.0
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # a forked child never shares its parent's socket: it makes its own connection
        try:
            os.write(writer, b"%d" % int(pause(60.0)))
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert os.read(reader, 16) == b"160" and pause(70.0) == 170.0
    scripts.close()
    assert scripts._connection is None


def test_scripts_of_two_components_share_one_pipeline(redis_client: redis.Redis) -> None:
    redis_client.script_flush()
    distributor = Scripts(redis_client, DISTRIBUTOR_CONTRACTS)
    page_slots = Scripts(redis_client, [PAGE_SLOT_CONTRACTS["track_browser_tasks"]])  # only the one it needs

    def build(pipeline) -> None:
        pipeline.call("stats", "shop", window_seconds=60)
        page_slots.queue(pipeline, "track_browser_tasks", PageSlotKeys(), sample_size=10, state="pending",
                         entries=["shop|t1", "SG"])

    stats, recorded = distributor.run_pipeline(build)
    assert stats.pending == 0 and recorded.recorded == 1
    with pytest.raises(KeyError):
        page_slots.queue(None, "slot_claim", PageSlotKeys())  # type: ignore[arg-type]  # not registered here


def test_an_error_answered_by_a_command_is_raised_after_the_others_ran(redis_client: redis.Redis,
                                                                       tmp_path: Path) -> None:
    (tmp_path / "common.lua").write_text("-- common: nothing shared\n")
    (tmp_path / "broken.lua").write_text("-- broken: fails\n-- KEYS[1] intake\n-- Returns x: nothing\n"
                                         "return redis.call('INCR', KEYS[1])\n")
    broken = declare_script("broken", "intake", "", {"x": int}, directory=tmp_path, key_space=SourceKeys,
                            table=False)
    redis_client.set(SourceKeys("shop").intake, "not a number")
    scripts = Scripts(redis_client, [broken])

    def build(pipeline) -> None:
        pipeline.call("broken", "shop")
        pipeline.pipeline.set("after", "1")

    with pytest.raises(redis.ResponseError, match="not an integer"):
        scripts.run_pipeline(build)
    assert redis_client.get("after") is not None
