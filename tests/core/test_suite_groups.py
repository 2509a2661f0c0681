"""The suite's own plumbing: `make test` runs under pytest-xdist with --dist loadgroup, and a
module that builds something expensive once (the demo seeding, the faults stack, the replica
cluster) marks its tests with one xdist_group so they all run on one worker, one after another.
If the installed pytest and pytest-xdist stop agreeing on how a group is named (pytest 9 with
xdist 3.8 did), every group is silently split and each piece builds its own copy."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("suite-groups")
def test_an_xdist_group_reaches_the_scheduler(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("runs under `pytest -n N --dist loadgroup` (make test)")
    # The scheduler sends every test whose id ends in the same "@group" to one worker.
    assert request.node.nodeid.endswith("@suite-groups"), request.node.nodeid
