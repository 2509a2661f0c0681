"""Report delivery: S3 upload against moto's S3 server on loopback (real HTTP, boto3's own
client), mail through Django's SMTP backend to a loopback SMTP server, failures of either
recorded without losing the report, and the PDF rendered to pixels."""

from __future__ import annotations

import io

import boto3
import pytest

from greenops.reports import generate
from greenops.reports.models import Status, Trigger
from greenops.reports.month_figures import Month

BUCKET = "finance-archive"


@pytest.fixture
def s3_server(monkeypatch):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto accepts any credentials; these only keep boto3 from looking for real ones.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


AUGUST = Month(2026, 8)


def _generate(team, month: Month = AUGUST):
    report = generate.request(team, month, Trigger.COMMAND, enqueue=False)
    return generate.run(report.id)


def test_new_revision_is_uploaded_to_s3(team, settings, s3_server):
    settings.REPORTS_S3_BUCKET = BUCKET
    settings.REPORTS_S3_PREFIX = "greenops/monthly"
    settings.REPORTS_S3_ENDPOINT_URL = s3_server
    settings.REPORTS_S3_REGION = "eu-west-1"
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="eu-west-1")
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    report = _generate(team)
    assert report.status == Status.DONE and report.s3_error == ""
    key = f"greenops/monthly/{team.slug}/2026-08/greenops-{team.slug}-2026-08-r1"
    assert report.s3_keys == [f"{key}.pdf", f"{key}.csv"]
    pdf = s3.get_object(Bucket=BUCKET, Key=f"{key}.pdf")
    assert pdf["ContentType"] == "application/pdf"
    assert pdf["Body"].read() == bytes(report.pdf_data)
    assert s3.get_object(Bucket=BUCKET, Key=f"{key}.csv")["Body"].read() == bytes(
        report.csv_data)


def test_upload_failure_is_recorded_and_the_report_stays(team, settings, s3_server):
    settings.REPORTS_S3_BUCKET = "no-such-bucket"
    settings.REPORTS_S3_ENDPOINT_URL = s3_server
    report = _generate(team)
    assert report.status == Status.DONE and report.revision == 1
    assert report.s3_keys == [] and "NoSuchBucket" in report.s3_error


def test_pdf_pages_render_to_pixels(team):
    import pypdfium2

    report = _generate(team)
    pdf = pypdfium2.PdfDocument(io.BytesIO(bytes(report.pdf_data)))
    assert len(pdf) >= 2
    for i in range(len(pdf)):
        image = pdf[i].render(scale=1).to_pil().convert("L")
        lo, hi = image.getextrema()
        assert hi - lo > 100, f"page {i + 1} is blank"  # text and rules drawn, not empty


@pytest.fixture
def smtp_server():
    """Just enough of SMTP (RFC 5321) on loopback for Django's SMTP backend: greet, accept
    each MAIL/RCPT/DATA, and keep what was sent."""
    import socketserver
    import threading

    received: list[dict] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            out = self.wfile
            out.write(b"220 loopback ESMTP\r\n")
            msg: dict = {"rcpt": []}
            while line := self.rfile.readline():
                cmd = line.decode().strip().upper()
                if cmd.startswith(("EHLO", "HELO")):
                    out.write(b"250 loopback\r\n")
                elif cmd.startswith("MAIL FROM"):
                    msg = {"from": line.decode().strip()[10:], "rcpt": []}
                    out.write(b"250 OK\r\n")
                elif cmd.startswith("RCPT TO"):
                    msg["rcpt"].append(line.decode().strip()[8:].strip("<>"))
                    out.write(b"250 OK\r\n")
                elif cmd == "DATA":
                    out.write(b"354 go on\r\n")
                    body = b""
                    while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                        body += chunk
                    msg["data"] = body
                    received.append(msg)
                    out.write(b"250 queued\r\n")
                elif cmd == "QUIT":
                    out.write(b"221 bye\r\n")
                    return
                else:  # RSET, NOOP
                    out.write(b"250 OK\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()


def test_subscribers_get_the_files_through_the_configured_smtp_server(team, users, settings,
                                                                      smtp_server):
    from email import message_from_bytes

    from greenops.reports.models import Subscription

    port, received = smtp_server
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    Subscription.objects.create(team=team, user=users["member"])
    Subscription.objects.create(team=team, user=users["owner"])
    report = _generate(team)
    (mail,) = received
    assert sorted(mail["rcpt"]) == ["member@example.com", "owner@example.com"]
    parsed = message_from_bytes(mail["data"])
    assert "August 2026" in parsed["Subject"]
    files = {p.get_filename(): p.get_payload(decode=True) for p in parsed.walk()
             if p.get_filename()}
    assert files[report.file_name("pdf")] == bytes(report.pdf_data)
    assert files[report.file_name("csv")] == bytes(report.csv_data)
    report.refresh_from_db()
    assert report.emailed_to == ["member@example.com", "owner@example.com"]


def test_mail_server_down_is_recorded_and_the_report_stays(team, users, settings):
    import socket

    from greenops.reports.models import Subscription

    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", port, 2
    Subscription.objects.create(team=team, user=users["member"])
    report = _generate(team)
    assert report.status == Status.DONE and report.revision == 1
    assert report.emailed_to == [] and "ConnectionRefusedError" in report.email_error
