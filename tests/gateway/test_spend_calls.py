"""The spend scripts' calls packed from parts made once per key and window (gateway.keys.spend_calls)
are exactly the commands their slots name: each value in its slot, whatever was cached before."""

from __future__ import annotations

from gateway.config.key_settings import RateLimit
from gateway.keys import spend_store
from gateway.keys.rate_limits import RateWindows
from gateway.redis.batch import Arg, LuaScript, ScriptSlots, pack_commands
from gateway.redis.keys import RedisKeys

KEYS = RedisKeys("calls-test")


def by_slots(script: LuaScript, slots: ScriptSlots, keys: dict[str, str], args: dict[str, Arg]) -> bytes:
    return pack_commands(
        [("EVALSHA", script.sha, len(slots.keys), *slots.keys_of(**keys), *slots.args_of(**args))]
    )


def spend_keys(op_id: str) -> dict[str, str]:
    return {
        "spend_key": KEYS.spend("k1", 600),
        "pending_key": KEYS.spend_pending("k1", 600),
        "epoch_key": KEYS.spend_epoch,
        "cancelled_key": KEYS.spend_cancelled(op_id),
    }


def test_a_plain_reservation_and_settlement_are_their_slots_in_order() -> None:
    calls = spend_store.RedisSpendStore(object(), KEYS, timeout_s=1, counter_ttl_s=900)._calls  # type: ignore[arg-type]
    window = calls.window("k1", 600)
    for op_id, amount, limit, epoch in (("a1", 5, 10, "e1"), ("b2", 7, 10, "e1"), ("c3", 7, 99, "e2")):
        expected = by_slots(
            spend_store._RESERVE_PLAIN_LUA,
            spend_store._RESERVE_SLOTS,
            spend_keys(op_id),
            dict(spend_limit=limit, ttl=900, epoch=epoch, amount=amount, op_id=op_id),
        )
        assert calls.reserve_plain(window, op_id, amount, limit, 900, epoch) == expected
        for cancel in (0, 1):
            args: dict[str, Arg] = dict(epoch=epoch, marker_ttl=900, cancel=cancel, op_id=op_id, actual=3)
            expected = by_slots(
                spend_store._FINISH_PLAIN_LUA, spend_store._FINISH_SLOTS, spend_keys(op_id), args
            )
            assert calls.finish(window, op_id, 3, epoch, cancel, (), (0, 0)) == (None, expected)


def test_a_rated_reservation_and_settlement_are_their_slots_then_the_windows() -> None:
    calls = spend_store.RedisSpendStore(object(), KEYS, timeout_s=1, counter_ttl_s=900)._calls  # type: ignore[arg-type]
    window = calls.window("k1", 600)
    limits = (RateLimit(window_s=60, requests=5, tokens=None), RateLimit(window_s=1, requests=None, tokens=9))
    windows = RateWindows.at(limits, 610.0, "k1", KEYS)
    slots, script = spend_store._RESERVE_RATED_SLOTS, spend_store._RESERVE_LUA
    for rollover in ((KEYS.spend("k1", 0), 12), (KEYS.spend("k1", 600), -1)):
        for op_id, tokens in (("a1", 40), ("b2", 41)):
            keys = slots.keys_of(**spend_keys(op_id), rollover_key=rollover[0])
            values = slots.args_of(
                spend_limit=10,
                ttl=900,
                epoch="e1",
                amount=5,
                op_id=op_id,
                rollover_cap=rollover[1],
                rate_n=2,
                rate_tokens=tokens,
            )
            command = (
                "EVALSHA",
                script.sha,
                len(keys) + 2,
                *keys,
                *windows.keys,
                *values,
                *windows.args_tail,
            )
            packed = calls.reserve_rated(window, op_id, 5, 10, 900, "e1", rollover, windows, tokens)
            assert packed == pack_commands([command])
    args: dict[str, Arg] = dict(
        epoch="e1",
        marker_ttl=900,
        cancel=0,
        op_id="a1",
        actual=3,
        rate_n=2,
        requests_delta=0,
        tokens_delta=-7,
    )
    slots, script = spend_store._FINISH_RATED_SLOTS, spend_store._FINISH_LUA
    command = ("EVALSHA", script.sha, len(slots.keys) + 2, *slots.keys_of(**spend_keys("a1")), *windows.keys)
    expected = pack_commands([(*command, *slots.args_of(**args))])
    assert calls.finish(window, "a1", 3, "e1", 0, windows.keys, (0, -7)) == (script, expected)
