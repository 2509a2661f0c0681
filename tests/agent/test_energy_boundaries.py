"""The edges of the energy rules, found by mutation testing (tests/mutation/SURVIVORS.md).

Each case sits exactly on a boundary the rules draw, where an off-by-one comparison or a
margin applied the wrong way round would change the method or the joules.
"""

from collectors.energy import COUNTER, MAX_COUNTER_GAP_S, PLAUSIBLE_MARGIN, interval_energy

MAX_GAP = 5.0
LIMIT_W = 400.0  # e.g. an A100-SXM4-40GB's NVML power limit


def test_a_counter_that_did_not_move_is_zero_joules_measured():
    # An idle GPU over a short interval: the counter reads the same twice. That is a measured
    # 0 J ("counter"), not a reason to fall back to integrating the 55 W power reading.
    assert interval_energy(1.0, 7_000_000, 7_000_000, 55.0, 55.0, MAX_GAP, LIMIT_W) == (
        0.0, COUNTER)


def test_a_gpu_at_its_power_limit_is_plausible():
    # The common case of a busy GPU: 400 W for 10 s = 4,000 J = 4,000,000 mJ of counter,
    # exactly power limit x dt -- well within the margin (a bound that divided by the margin,
    # 400 x 10 / 1.2 = 3,333 J, would throw it away).
    assert interval_energy(10.0, 0, 4_000_000, 400.0, 400.0, MAX_GAP, LIMIT_W) == (
        4000.0, COUNTER)


def test_a_delta_exactly_at_the_plausibility_bound_is_kept():
    # limit x dt x margin = 400 W x 2 s x 1.2 = 960 J: at the bound the counter still counts;
    # one joule above it does not (the trapezoid of 300 W over the 2 s is used instead).
    bound_mj = int(LIMIT_W * 2.0 * PLAUSIBLE_MARGIN * 1000)
    assert bound_mj == 960_000
    assert interval_energy(2.0, 0, bound_mj, 300.0, 300.0, MAX_GAP, LIMIT_W) == (960.0, COUNTER)
    assert interval_energy(2.0, 0, bound_mj + 1000, 300.0, 300.0, MAX_GAP, LIMIT_W) == (
        600.0, "power")


def test_a_stall_of_exactly_an_hour_still_uses_the_counter():
    # dt = 3600 s = MAX_COUNTER_GAP_S: the counter is trusted up to and including an hour.
    # 100 W average over the hour = 360,000 J (plausible: limit 400 W x 3600 s x 1.2).
    assert MAX_COUNTER_GAP_S == 3600.0
    assert interval_energy(3600.0, 0, 360_000_000, 100.0, 100.0, MAX_GAP, LIMIT_W) == (
        360_000.0, COUNTER)
