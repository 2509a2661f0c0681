"""Team tasks: invitation mail, sent outside the request that made the invitation."""

from __future__ import annotations

from celery import shared_task

from greenops.teams import invitations


@shared_task(bind=True, acks_late=True, max_retries=invitations.MAX_MAIL_ATTEMPTS - 1)
def send_invitation(self, invitation_id: int, base_url: str) -> str:
    outcome = invitations.deliver(invitation_id, base_url)
    # In-process (eager) tasks do not retry: the page shows the failure and offers a resend.
    if outcome == "failed" and not self.request.is_eager and (
            self.request.retries < self.max_retries):
        raise self.retry(countdown=30 * 2 ** self.request.retries)
    return outcome
