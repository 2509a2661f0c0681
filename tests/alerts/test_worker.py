"""Beat -> evaluation -> notification through a real Celery worker on Redis, exactly once
across duplicated messages (a broker redelivery, two beats)."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from django.utils import timezone

from greenops.alerts import channels, tasks
from greenops.alerts.models import Notification, RuleEvent
from tests.support.alerts import Receiver, make_rule, rollup
from tests.support.celery_worker import celery_worker
from tests.support.polling import wait_for


@pytest.fixture
def alerts_worker(monkeypatch, settings):
    # The receiver is on 127.0.0.1, which the outbound guard refuses unless allowed: here and
    # in the worker process (it reads the environment).
    monkeypatch.setenv("GREENOPS_OUTBOUND_ALLOW", "127.0.0.1/32")
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    with celery_worker("alerts") as (queue, output):
        yield queue
    assert b"Traceback" not in output[0], output[0].decode(errors="replace")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_beat_evaluation_notification_exactly_once(users, team, alerts_worker):
    with Receiver() as rx:
        ch, secret = channels.create(team, {"name": "hook", "kind": "webhook",
                                            "target": rx.url + "/a"})
        rule = make_rule(team, [ch], name="Energy per inference too high",
                         state_since=timezone.now())
        # 3600 J over 1200 inferences = 3 J > 2 J, in every hour the worker may read.
        top = timezone.now().replace(minute=0, second=0, microsecond=0)
        for h in range(-2, 2):
            rollup(team, top + dt.timedelta(hours=h), gpu_energy_j=3600, requests=1200)
        tick = tasks.tick_of(timezone.now()).isoformat()
        # Beat's message, plus the same rule's minute sent twice more (a redelivery).
        tasks.evaluate_rules.delay()
        tasks.evaluate_rule.delay(rule.id, tick)
        tasks.evaluate_rule.delay(rule.id, tick)
        # Two different minutes at once on the two pool processes (a late beat message and
        # the next one): both pass the per-minute claim, only one may notify.
        later = (dt.datetime.fromisoformat(tick) + dt.timedelta(minutes=1)).isoformat()
        tasks.evaluate_rule.delay(rule.id, later)
        wait_for(lambda: Notification.objects.filter(rule=rule).exists(), timeout=60)
        tasks.deliver_due.delay()
        tasks.deliver_due.delay()  # two beats, or one replayed
        wait_for(lambda: Notification.objects.filter(status="sent").exists(), timeout=60)
        time.sleep(2)  # room for a duplicate to show up, if there were one
    assert len(rx.requests) == 1
    doc = json.loads(rx.requests[0][2])
    assert [a["kind"] for a in doc["alerts"]] == ["firing"]
    n = Notification.objects.get()
    assert (n.kind, n.status, n.attempts) == ("firing", "sent", 1)
    assert list(RuleEvent.objects.values_list("from_state", "to_state")) == [("ok", "firing")]
