"""The per-address throttle of refused keys (gateway/keys/auth_throttle.py): held off after the limit
within a window, released when it ends, bounded memory whatever the number of addresses."""

from __future__ import annotations

from gateway.keys.auth_throttle import AuthFailureThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_held_off_after_the_limit_until_its_window_ends() -> None:
    clock = Clock()
    throttle = AuthFailureThrottle(3, 60.0, clock=clock)
    for _ in range(2):
        throttle.refused("10.0.0.1")
    assert throttle.held_off_s("10.0.0.1") == 0.0
    throttle.refused("10.0.0.1")
    clock.now += 20
    assert throttle.held_off_s("10.0.0.1") == 40.0
    assert throttle.held_off_s("10.0.0.2") == 0.0  # another address is not
    clock.now += 40
    assert throttle.held_off_s("10.0.0.1") == 0.0
    throttle.refused("10.0.0.1")  # a new window starts with one refusal
    assert throttle.held_off_s("10.0.0.1") == 0.0


def test_memory_is_bounded_whatever_the_number_of_addresses() -> None:
    clock = Clock()
    throttle = AuthFailureThrottle(2, 60.0, max_addresses=100, clock=clock)
    throttle.refused("attacker")
    throttle.refused("attacker")
    for i in range(10_000):
        throttle.refused(f"10.1.{i // 256}.{i % 256}")
        assert len(throttle) <= 100
    clock.now += 61
    for i in range(50):
        throttle.refused(f"10.2.0.{i}")
    assert len(throttle) <= 100


def test_a_limit_of_zero_never_holds_off() -> None:
    throttle = AuthFailureThrottle(0, 60.0)
    for _ in range(100):
        throttle.refused("10.0.0.1")
    assert throttle.held_off_s("10.0.0.1") == 0.0 and len(throttle) == 0
