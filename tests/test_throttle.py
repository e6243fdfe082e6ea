"""OncePerWindow: a key goes through once per window; memory stays bounded."""

from __future__ import annotations

from resurrect.throttle import OncePerWindow


def test_a_key_is_held_back_within_the_window_and_let_through_after() -> None:
    once: OncePerWindow[str] = OncePerWindow(60.0)
    assert not once.holds_back("gpu0", 0.0)
    once.let_through("gpu0", 0.0)
    assert once.holds_back("gpu0", 59.9)
    assert not once.holds_back("gpu1", 59.9)
    assert not once.holds_back("gpu0", 60.0)


def test_past_the_bound_old_keys_then_the_oldest_are_forgotten() -> None:
    once: OncePerWindow[int] = OncePerWindow(10.0, max_keys=4)
    once.let_through(0, 0.0)  # outside the window by the time the bound is passed
    for key in range(1, 5):
        once.let_through(key, 20.0)
    assert len(once) == 2
    assert not once.holds_back(0, 20.0)
    assert not once.holds_back(1, 20.0)  # the oldest of the recent, beyond half the bound
    assert not once.holds_back(2, 20.0)
    assert once.holds_back(3, 20.0)
    assert once.holds_back(4, 20.0)
