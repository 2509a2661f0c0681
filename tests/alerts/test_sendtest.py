"""Send test is a task: the page answers at once with the test queued, a worker sends it, and
the page shows the result when it arrives -- no web worker waits on a remote server."""

from __future__ import annotations

import time

import pytest

from greenops.alerts import channels
from greenops.alerts.models import Notification
from tests.support.alerts import Receiver

pytestmark = pytest.mark.django_db


def test_the_page_answers_before_the_send_and_shows_the_result(
        client, users, team, settings, django_capture_on_commit_callbacks):
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    slow = Receiver()
    real_answer = slow.server.RequestHandlerClass._answer

    def late(handler):  # the receiver takes 2 s to answer
        time.sleep(2)
        real_answer(handler)

    slow.server.RequestHandlerClass.do_POST = late
    with slow as rx:
        ch, _ = channels.create(team, {"name": "hook", "kind": "webhook",
                                       "target": rx.url + "/t"})
        client.force_login(users["owner"])
        started = time.monotonic()
        with django_capture_on_commit_callbacks(execute=False) as queued:
            resp = client.post(f"/teams/vision/alerts/channels/{ch.id}/test/")
        answered_in = time.monotonic() - started
        n = Notification.objects.get(kind="test")
        assert resp.status_code == 302 and resp["Location"].endswith(f"?test={n.id}")
        assert answered_in < 1.5 and rx.requests == []  # the send has not happened
        page = client.get(resp["Location"]).content.decode()
        assert "Test to hook: sending…" in page
        status = f"/teams/vision/alerts/channels/{ch.id}/tests/{n.id}/"
        assert client.get(status).json()["done"] is False
        for callback in queued:  # the worker's turn (tasks run eagerly in tests)
            callback()
    assert len(rx.requests) == 1
    doc = client.get(status).json()
    assert doc == {"status": "sent", "done": True, "error": None, "error_class": None,
                   "text": "Test sent to hook with live figures."}


def test_a_refused_test_says_so_without_a_500(client, users, team,
                                              django_capture_on_commit_callbacks,
                                              outbound_connects):
    # Saved before the operator narrowed the allowed ranges: refused at the send.
    ch, _ = channels.create(team, {"name": "meta", "kind": "webhook",
                                   "target": "http://metadata.example/latest"})
    import socket

    real = socket.getaddrinfo

    def dns(host, *args, **kwargs):
        if host == "metadata.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80))]
        return real(host, *args, **kwargs)

    socket.getaddrinfo = dns
    try:
        client.force_login(users["owner"])
        with django_capture_on_commit_callbacks(execute=True):
            resp = client.post(f"/teams/vision/alerts/channels/{ch.id}/test/")
    finally:
        socket.getaddrinfo = real
    assert resp.status_code == 302 and outbound_connects == []
    page = client.get(resp["Location"]).content.decode()
    assert "Test to meta failed: could not connect to the receiver" in page
