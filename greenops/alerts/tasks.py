"""Celery tasks of the alerts app. Tasks take ids, never objects.

Beat runs `evaluate_rules` every minute (after the KPI rollups it reads: those run every five
minutes and every rule reads whole hours, so a minute's lag never shows a half-built hour) and
`deliver_due` every ALERTS_DELIVER_EVERY_S seconds. Each rule is its own task, so one slow or
failing rule does not hold up the others.
"""

from __future__ import annotations

import datetime as dt

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from greenops.alerts import evaluate, notify
from greenops.alerts.models import Channel, EmailAddress, Rule, RuleValue
from greenops.beat import single_flight


def tick_of(now: dt.datetime) -> dt.datetime:
    return now.replace(second=0, microsecond=0)


@shared_task
@single_flight
def evaluate_rules() -> int:
    """Beat: one evaluate_rule task per enabled rule, all for the same minute."""
    tick = tick_of(timezone.now()).isoformat()
    ids = list(Rule.objects.filter(enabled=True).values_list("id", flat=True))
    for rule_id in ids:
        evaluate_rule.delay(rule_id, tick)
    return len(ids)


# A rule that takes longer than this is stopped and shows the error on its page (Celery raises
# SoftTimeLimitExceeded inside the evaluation, which observe() records as the Error state).
@shared_task(soft_time_limit=50, time_limit=60)
def evaluate_rule(rule_id: int, tick: str) -> str:
    """Evaluate one rule for one minute. Claiming the minute first makes a duplicated message
    (a broker redelivery, two beat processes) a no-op instead of a second notification."""
    at = dt.datetime.fromisoformat(tick)
    previous = Rule.objects.filter(id=rule_id).values_list("last_tick", flat=True).first()
    if not evaluate.claim(rule_id, at):
        return "already evaluated"
    # The claim stops a second run of the same minute; two different minutes (a late beat
    # message and the next one) can still run at once on two workers. Each would read the rule
    # as "ok", both would record ok -> firing and both would notify. Holding the rule's row
    # for the evaluation makes the second one read the first one's result.
    try:
        with transaction.atomic():
            rule = (Rule.objects.select_for_update(of=("self",))
                    .select_related("team", "host", "gpu__host", "workload").get(id=rule_id))
            evaluate.run(rule, max(at, timezone.now()))
    except Exception as exc:  # the write itself failed (observe() records the figure's errors)
        if not connection.is_usable():  # e.g. a time limit hit mid-query
            connection.close()
        evaluate.give_back(rule_id, at, previous, exc)
        return "error"
    return rule.state


@shared_task
@single_flight
def deliver_due() -> int:
    """Beat: a delivery task per channel with notifications due (new ones and retries)."""
    ids = notify.due_channel_ids()
    for channel_id in ids:
        deliver_channel.delay(channel_id)
    notify.stale_sending()
    return len(ids)


@shared_task
def deliver_channel(channel_id: int) -> int:
    channel = Channel.objects.select_related("team").filter(id=channel_id).first()
    if channel is None:
        return 0
    return len(notify.deliver(channel))


@shared_task
def confirm_addresses(address_ids: list[int], site_url: str = "") -> int:
    """Mail each address outside the team a link to confirm it wants the team's alerts."""
    base = (settings.SITE_URL or site_url).rstrip("/")
    n = 0
    for row in EmailAddress.objects.filter(id__in=address_ids, confirmed_at__isnull=True) \
            .select_related("team"):
        link = base + reverse("alert-email-confirm", args=[row.token])
        send_mail(f"Confirm GreenOps alerts of {row.team.name}",
                  f"A team admin of {row.team.name} asked GreenOps to send its alert e-mails "
                  f"to {row.address}.\n\nTo receive them, open {link} and press Confirm.\n"
                  "If you did not expect this, ignore this message: nothing will be sent.",
                  settings.DEFAULT_FROM_EMAIL, [row.address])
        n += 1
    return n


@shared_task
def send_test(channel_id: int, notification_ids: list[int]) -> str:
    """"Send test" from the channels page: the page answered at once and polls the row."""
    channel = Channel.objects.select_related("team").filter(id=channel_id).first()
    if channel is None:
        return "gone"
    row = notify.send_test(channel, notification_ids)
    return row.status if row else "gone"


@shared_task
@single_flight
def prune_values(keep_days: int | None = None) -> int:
    days = keep_days or settings.ALERTS_KEEP_VALUES_DAYS
    cutoff = timezone.now() - dt.timedelta(days=days)
    return RuleValue.objects.filter(at__lt=cutoff).delete()[0]
