"""Energy per interval, with figures worked out by hand in the comments."""

import pytest

from collectors.energy import COUNTER, POWER, EnergyAccountant, interval_energy

MAX_GAP = 5.0


def test_counter_delta_is_preferred():
    # 1_250_000 mJ - 1_000_000 mJ = 250_000 mJ = 250 J, whatever the power says.
    assert interval_energy(1.0, 1_000_000, 1_250_000, 300.0, 300.0, MAX_GAP) == (250.0, COUNTER)


def test_counter_reset_falls_back_to_power():
    # Counter went down (driver reload): trapezoid (300 W + 100 W) / 2 = 200 W over 1 s = 200 J.
    assert interval_energy(1.0, 5_000_000, 200_000, 300.0, 100.0, MAX_GAP) == (200.0, POWER)


def test_gap_beyond_max_counts_only_the_capped_span():
    # 12 s gap > 5 s cap: the counter (3000 J) is not trusted across it; count
    # (250 + 350) / 2 = 300 W over the 5 s cap only = 1500 J.
    assert interval_energy(12.0, 0, 3_000_000, 250.0, 350.0, MAX_GAP) == (1500.0, POWER)


def test_gap_at_the_cap_still_uses_the_counter():
    assert interval_energy(5.0, 0, 3_000_000, 250.0, 350.0, MAX_GAP) == (3000.0, COUNTER)


def test_counter_unsupported_integrates_power():
    # (100 W + 200 W) / 2 = 150 W over 0.5 s = 75 J.
    assert interval_energy(0.5, None, None, 100.0, 200.0, MAX_GAP) == (75.0, POWER)


def test_previous_power_missing_uses_current_power():
    # 200 W x 2 s = 400 J.
    assert interval_energy(2.0, None, None, None, 200.0, MAX_GAP) == (400.0, POWER)


def test_nothing_known_gives_none():
    assert interval_energy(1.0, None, None, 100.0, None, MAX_GAP) == (None, None)
    assert interval_energy(0.0, 1, 2, 1.0, 1.0, MAX_GAP) == (None, None)


def test_accountant_over_a_window_with_a_reset_and_a_gap():
    acc = EnergyAccountant(max_gap_s=5.0)
    steps = [
        # (mono s, counter mJ, power W) -> expected (energy J, method)
        (100.0, 1_000_000, 200.0, (None, None)),  # first sample: no interval yet
        (101.0, 1_200_000, 200.0, (200.0, COUNTER)),  # 200_000 mJ
        (102.0, 1_500_000, 400.0, (300.0, COUNTER)),  # 300_000 mJ
        (103.0, 50_000, 100.0, (250.0, POWER)),  # reset: (400 + 100) / 2 x 1 s
        (104.0, 150_000, 100.0, (100.0, COUNTER)),  # counting again from the new base
        (124.0, 9_000_000, 300.0, (1000.0, POWER)),  # 20 s gap: (100 + 300) / 2 x 5 s
    ]
    for mono, counter, power, expected in steps:
        assert acc.update(0, mono, counter, power) == pytest.approx(expected)
    # Another GPU has its own history: its first sample has no interval.
    assert acc.update(1, 124.0, 9_000_000, 300.0) == (None, None)
    # Sum over the window: 200 + 300 + 250 + 100 + 1000 = 1850 J.
    total = 0.0
    acc2 = EnergyAccountant(max_gap_s=5.0)
    for mono, counter, power, _ in steps:
        energy, _method = acc2.update(0, mono, counter, power)
        total += energy or 0.0
    assert total == pytest.approx(1850.0)


# --- issue 8 item 15: keep an exact counter delta across a short stall when it is plausible ---

H100_LIMIT_W = 700.0


def test_a_six_second_stall_keeps_the_plausible_counter_delta():
    # 1 s sampling (5 s cap) stalled for 6 s. Counter: 2,400,000 mJ = 2,400 J (400 W average).
    # Plausible: 2,400 J <= 700 W x 6 s x 1.2 = 5,040 J, so the exact delta is kept.
    # Before: the counter was dropped for (300 + 500)/2 W x 5 s = 2,000 J, 400 J short.
    got = interval_energy(6.0, 10_000_000, 12_400_000, 300.0, 500.0, MAX_GAP, H100_LIMIT_W)
    assert got == (2400.0, COUNTER)


def test_an_implausible_counter_delta_integrates_power():
    # 10,000 J in 6 s is 1,667 W on a 700 W board: more than 5,040 J, a jump, not energy.
    # Power instead: (300 + 500)/2 W x min(6, 5) s = 2,000 J.
    got = interval_energy(6.0, 0, 10_000_000, 300.0, 500.0, MAX_GAP, H100_LIMIT_W)
    assert got == (2000.0, POWER)
    # Also inside the cap: 5,000 J in 1 s (> 700 x 1 x 1.2 = 840 J) -> 400 W x 1 s = 400 J.
    assert interval_energy(1.0, 0, 5_000_000, 400.0, 400.0, MAX_GAP, H100_LIMIT_W) == (
        400.0, POWER)


def test_without_a_power_limit_the_old_gap_rule_holds():
    # No limit to judge plausibility: 12 s > 5 s cap, (250 + 350)/2 W x 5 s = 1,500 J.
    assert interval_energy(12.0, 0, 3_000_000, 250.0, 350.0, MAX_GAP, None) == (1500.0, POWER)


def test_a_gap_beyond_an_hour_is_never_bridged_by_the_counter():
    # 2 h apart: a driver reload in between could hide; power over the 5 s cap only.
    got = interval_energy(7200.0, 0, 1_000_000_000, 100.0, 100.0, MAX_GAP, H100_LIMIT_W)
    assert got == (500.0, POWER)


def test_accountant_uses_each_gpus_power_limit():
    acc = EnergyAccountant(max_gap_s=5.0, power_limit_w={0: 700.0, 1: None})
    for gpu in (0, 1):
        assert acc.update(gpu, 100.0, 1_000_000, 400.0) == (None, None)
    # 6 s later: GPU 0 keeps its 2,400 J counter delta; GPU 1 (no limit known) integrates
    # 400 W x 5 s = 2,000 J.
    assert acc.update(0, 106.0, 3_400_000, 400.0) == (2400.0, COUNTER)
    assert acc.update(1, 106.0, 3_400_000, 400.0) == (2000.0, POWER)
