"""Counts read as people say them: "1 minute", "2 minutes", "1,000 GPUs"."""

from greenops.units import plural


def test_one_takes_the_singular_and_everything_else_the_plural():
    assert plural(1, "minute") == "1 minute"
    assert plural(2, "minute") == "2 minutes"
    assert plural(0, "host") == "0 hosts"
    assert plural(1000, "GPU") == "1,000 GPUs"  # thousands separated as |num does
    assert plural(1.5, "day") == "1.5 days"
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"
