"""Fixtures shared by this folder's test modules."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.kpis import rollup
from greenops.teams.models import ApiToken
from tests.support.factories import gz, make_host
from tests.support.reports import (
    H0,
    H1,
    H2,
    H3,
    UTC,
    S,
    hour_batch,
    inference_doc,
    set_zone,
)


@pytest.fixture
def october(team, settings, post_batch, client, django_capture_on_commit_callbacks):
    """The scenario of the module docstring, sent through the ingest APIs and rolled up."""
    from greenops.carbon.models import HostSite, Site
    from greenops.costs.models import InstanceType, Price
    from greenops.workloads.models import Workload

    settings.INGEST_MAX_AGE_S = 3 * 365 * 86400  # the month is in the past; the test is not
    set_zone(team, "Europe/Paris")
    InstanceType.objects.create(provider="aws", name="g.test", gpu_model="NVIDIA L4",
                                gpu_count=1, gpu_memory_gib=24, source="test catalog")
    Price.objects.create(provider="aws", region="eu-test-1", instance_type="g.test",
                         option="on_demand", usd_per_hour="4.00", method="snapshot",
                         source="test price list",
                         as_of=dt.datetime(2026, 1, 1, tzinfo=UTC))
    host, token = make_host(team, "A", gpus=1)
    host.instance_type, host.region = "g.test", "eu-test-1"
    host.save()
    site = Site.objects.create(team=team, name="Paris DC", pue=1.5,
                               grid_intensity_override_g_per_kwh=400.0,
                               override_source="test utility contract")
    HostSite.objects.create(host=host, site=site)
    for hour, util in ((S, 50.0), (H0, 2.0), (H1, 50.0), (H2, 50.0), (H3, 50.0)):
        assert post_batch(token, hour_batch(hour, util)).status_code == 202
    w = Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")
    w.gpus.add(host.gpus.get())
    api_token = ApiToken.issue(team, "app")[1]
    doc = inference_doc([(H1 + dt.timedelta(minutes=10), 1000),
                         (H2 + dt.timedelta(minutes=10), 2000),
                         (H3 + dt.timedelta(minutes=30), 500)])
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post("/api/v1/inference", gz(doc), content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {api_token}", HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 202, r.content
    for hour in (S, H0, H1, H2, H3):
        rollup.rebuild(team, hour, hour + dt.timedelta(hours=1))
    return {"host": host, "workload": w, "site": site}
