"""Report delivery: S3 upload against moto's S3 server on loopback (real HTTP, boto3's own
client), an upload failure recorded without losing the report, and the PDF rendered to pixels."""

from __future__ import annotations

import io

import boto3
import pytest

from greenops.reports import generate
from greenops.reports.figures import Month
from greenops.reports.models import Status, Trigger

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
