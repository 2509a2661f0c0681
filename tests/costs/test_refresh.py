"""Price refresh through boto3, fed by botocore's Stubber with responses shaped like AWS's."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import boto3
import pytest
from botocore.stub import ANY, Stubber

from greenops.costs import aws_refresh, catalog
from greenops.costs.models import Price, PriceMethod, PriceRefresh

NOW = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)
SKU = "9QH9ZJ7TZ4S3NPXU"


def _dim(sku: str, term: str, rate: str, unit: str, usd: str, description: str) -> dict:
    return {
        "unit": unit, "endRange": "Inf", "description": description, "appliesTo": [],
        "rateCode": f"{sku}.{term}.{rate}", "beginRange": "0", "pricePerUnit": {"USD": usd},
    }


def price_list_item(itype: str = "g5.xlarge", region: str = "us-east-1") -> str:
    """One PriceList entry as get_products returns it: a JSON *string* (format aws_v1)."""
    reserved = {}
    for code, length, option, dims in [
        ("4NA7Y494T4", "1yr", "No Upfront",
         [("6YS6EN2CT7", "Hrs", "0.6340000000", "Linux/UNIX (Amazon VPC), g5.xlarge reserved")]),
        ("6QCMYABX3D", "1yr", "All Upfront",
         [("2TG2D8R56U", "Quantity", "5234", "Upfront Fee"),
          ("6YS6EN2CT7", "Hrs", "0.0000000000", "USD 0.0 per Linux/UNIX (Amazon VPC)")]),
        ("BPH4J8HBKS", "3yr", "No Upfront",
         [("6YS6EN2CT7", "Hrs", "0.4360000000", "Linux/UNIX (Amazon VPC), g5.xlarge reserved")]),
        ("7NE97W5U4E", "1yr", "No Upfront",  # convertible: skipped
         [("6YS6EN2CT7", "Hrs", "0.7300000000", "convertible")]),
    ]:
        reserved[f"{SKU}.{code}"] = {
            "priceDimensions": {f"{SKU}.{code}.{r}": _dim(SKU, code, r, u, usd, d)
                                for r, u, usd, d in dims},
            "sku": SKU, "effectiveDate": "2025-05-01T00:00:00Z", "offerTermCode": code,
            "termAttributes": {
                "LeaseContractLength": length,
                "OfferingClass": "convertible" if code == "7NE97W5U4E" else "standard",
                "PurchaseOption": option,
            },
        }
    return json.dumps({
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {
                "enhancedNetworkingSupported": "Yes", "intelTurboAvailable": "No",
                "memory": "16 GiB", "dedicatedEbsThroughput": "Up to 3500 Mbps", "vcpu": "4",
                "gpu": "1", "gpuMemory": "24 GiB", "capacitystatus": "Used",
                "locationType": "AWS Region", "storage": "1 x 250 NVMe SSD",
                "instanceFamily": "GPU instance", "operatingSystem": "Linux",
                "regionCode": region, "physicalProcessor": "AMD EPYC 7R32",
                "servicecode": "AmazonEC2", "usagetype": f"BoxUsage:{itype}",
                "tenancy": "Shared", "normalizationSizeFactor": "8", "instanceType": itype,
                "location": "US East (N. Virginia)", "operation": "RunInstances",
                "preInstalledSw": "NA", "licenseModel": "No License required",
            },
            "sku": SKU,
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {f"{SKU}.JRTCKXETXF": {
                "priceDimensions": {f"{SKU}.JRTCKXETXF.6YS6EN2CT7": _dim(
                    SKU, "JRTCKXETXF", "6YS6EN2CT7", "Hrs", "1.0060000000",
                    f"$1.006 per On Demand Linux {itype} Instance Hour")},
                "sku": SKU, "effectiveDate": "2025-11-01T00:00:00Z",
                "offerTermCode": "JRTCKXETXF", "termAttributes": {},
            }},
            "Reserved": reserved,
        },
        "version": "20251120182243",
        "publicationDate": "2025-11-20T18:22:43Z",
    })


def spot_rows() -> list[dict]:
    t0 = dt.datetime(2026, 11, 29, 0, 0, tzinfo=dt.UTC)
    rows = []
    # us-east-1a: 0.40, 0.42, 0.44 (median 0.42, latest 0.44); us-east-1b: 0.30, 0.50, 0.38
    # (median 0.38, latest 0.38) -> 1b is where one would launch
    for zone, prices in [("us-east-1a", ["0.400000", "0.420000", "0.440000"]),
                         ("us-east-1b", ["0.300000", "0.500000", "0.380000"])]:
        for i, p in enumerate(prices):
            rows.append({"AvailabilityZone": zone, "InstanceType": "g5.xlarge",
                         "ProductDescription": "Linux/UNIX", "SpotPrice": p,
                         "Timestamp": t0 + dt.timedelta(hours=i)})
    return rows


def clients():
    pricing = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x",
                           aws_secret_access_key="x")
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="x")
    return pricing, ec2


def test_parse_price_list_item_reads_on_demand_and_standard_reserved_terms():
    offers = {(o.option, o.term_years, o.payment): o
              for o in aws_refresh.parse_price_list_item(price_list_item())}
    assert set(offers) == {("on_demand", None, ""), ("reserved", 1, "no_upfront"),
                           ("reserved", 1, "all_upfront"), ("reserved", 3, "no_upfront")}
    assert offers[("on_demand", None, "")].usd_per_hour == Decimal("1.006")
    assert offers[("reserved", 1, "no_upfront")].usd_per_hour == Decimal("0.634")
    # All upfront: 5234 $ spread over 8760 h = 0.597489 $/h, plus 0 $/h
    assert offers[("reserved", 1, "all_upfront")].usd_per_hour == Decimal("0.597489")
    assert offers[("on_demand", None, "")].region == "us-east-1"


def test_summarise_spot_keeps_each_zone_and_plans_with_the_cheapest_median():
    [s] = aws_refresh.summarise_spot("us-east-1", spot_rows())
    assert s.zone == "us-east-1b"
    assert s.median_usd_per_hour == Decimal("0.38")
    assert s.latest_usd_per_hour == Decimal("0.38")
    assert s.per_zone["us-east-1a"]["median"] == "0.420000"
    assert s.per_zone["us-east-1a"]["latest"] == "0.440000"


@pytest.mark.django_db
def test_refresh_stores_prices_with_method_source_and_time():
    pricing, ec2 = clients()
    with Stubber(pricing) as ps, Stubber(ec2) as es:
        ps.add_response("get_products", {"FormatVersion": "aws_v1",
                                         "PriceList": [price_list_item()], "NextToken": "tok"},
                        {"ServiceCode": "AmazonEC2", "Filters": ANY, "FormatVersion": "aws_v1",
                         "MaxResults": 100})
        ps.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []},
                        {"ServiceCode": "AmazonEC2", "Filters": ANY, "FormatVersion": "aws_v1",
                         "MaxResults": 100, "NextToken": "tok"})
        es.add_response("describe_spot_price_history",
                        {"SpotPriceHistory": spot_rows(), "NextToken": ""},
                        {"InstanceTypes": ["g5.xlarge"], "ProductDescriptions": ["Linux/UNIX"],
                         "StartTime": NOW - dt.timedelta(days=7)})
        log = aws_refresh.refresh(pricing, {"us-east-1": ec2}, instance_types=["g5.xlarge"],
                                  now=NOW)
        ps.assert_no_pending_responses()
        es.assert_no_pending_responses()
    assert log.status == PriceRefresh.Status.DONE, log.message
    assert log.prices_updated == 5
    od = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="on_demand")
    assert od.method == PriceMethod.PRICE_LIST_API and od.as_of == NOW
    assert od.usd_per_hour == Decimal("1.006")
    spot = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="spot")
    assert spot.usd_per_hour == Decimal("0.38") and spot.latest_usd_per_hour == Decimal("0.38")
    assert "us-east-1b" in spot.source and spot.method == PriceMethod.SPOT_HISTORY
    # the snapshot's savings-plan rows are not touched by a refresh that has none
    sp = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="savings_plan",
                           term_years=1)
    assert sp.method == PriceMethod.SNAPSHOT


@pytest.mark.django_db
def test_failed_refresh_keeps_the_last_good_prices():
    before = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="on_demand")
    pricing, ec2 = clients()
    with Stubber(pricing) as ps, Stubber(ec2) as es:
        ps.add_client_error("get_products", service_error_code="ThrottlingException",
                            service_message="Rate exceeded", http_status_code=400)
        es.add_client_error("describe_spot_price_history",
                            service_error_code="RequestLimitExceeded",
                            service_message="Request limit exceeded.", http_status_code=503)
        log = aws_refresh.refresh(pricing, {"us-east-1": ec2}, instance_types=["g5.xlarge"],
                                  now=NOW)
    assert log.status == PriceRefresh.Status.FAILED
    assert "RequestLimitExceeded" in log.message and "previous prices are kept" in log.message
    assert "ThrottlingException" in log.message
    assert [p["status"] for p in log.parts] == ["failed", "failed"]
    after = Price.objects.get(pk=before.pk)
    assert (after.usd_per_hour, after.as_of, after.method) == (
        before.usd_per_hour, before.as_of, PriceMethod.SNAPSHOT)
    # no spot row came from the failed history call (the snapshot's P4/P5 samples stay)
    assert not Price.objects.filter(option="spot", method=PriceMethod.SPOT_HISTORY).exists()


@pytest.mark.django_db
def test_snapshot_never_overwrites_a_newer_refreshed_price():
    p = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="on_demand")
    p.usd_per_hour, p.as_of, p.method = Decimal("0.999"), NOW, PriceMethod.PRICE_LIST_API
    p.save()
    catalog.load_snapshot()
    assert Price.objects.get(pk=p.pk).usd_per_hour == Decimal("0.999")


@pytest.mark.django_db
def test_task_without_credentials_skips_and_keeps_snapshot(monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    from greenops.costs.tasks import refresh_prices

    out = refresh_prices()
    assert out["status"] == "skipped" and "No AWS credentials" in out["message"]
    assert Price.objects.filter(method=PriceMethod.SNAPSHOT).count() > 60


def test_beat_schedules_the_refresh(settings):
    tasks = {e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "greenops.costs.tasks.refresh_prices" in tasks


def savings_plan_result(itype: str, payment: str, seconds: int, rate: str,
                        plan: str = "EC2Instance", usage: str = "BoxUsage") -> dict:
    return {
        "savingsPlanOffering": {
            "offeringId": "3f1c6a0e-0000-4000-8000-000000000001", "paymentOption": payment,
            "planType": plan, "durationSeconds": seconds, "currency": "USD",
            "planDescription": f"{seconds // 31536000} year {payment} {plan} G5 us-east-1 Plan",
        },
        "rate": rate, "unit": "Hrs", "productType": "EC2", "serviceCode": "AmazonEC2",
        "usageType": f"{usage}:{itype}", "operation": "RunInstances",
        "properties": [
            {"name": "region", "value": "us-east-1"},
            {"name": "instanceType", "value": itype},
            {"name": "instanceFamily", "value": itype.split(".")[0]},
            {"name": "productDescription", "value": "Linux/UNIX"},
            {"name": "tenancy", "value": "shared"},
        ],
    }


@pytest.mark.django_db
def test_refresh_reads_ec2_instance_savings_plan_rates():
    pricing, ec2 = clients()
    sp_client = boto3.client("savingsplans", region_name="us-east-1", aws_access_key_id="x",
                             aws_secret_access_key="x")
    results = [
        savings_plan_result("g5.xlarge", "No Upfront", 31536000, "0.6100"),
        savings_plan_result("g5.xlarge", "All Upfront", 94608000, "0.3900"),
        savings_plan_result("g5.xlarge", "No Upfront", 31536000, "0.7000", plan="Compute"),
        savings_plan_result("g5.xlarge", "No Upfront", 31536000, "0.5000",
                            usage="DedicatedUsage"),
    ]
    with Stubber(pricing) as ps, Stubber(ec2) as es, Stubber(sp_client) as ss:
        ps.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []})
        ss.add_response("describe_savings_plans_offering_rates", {"searchResults": results})
        es.add_response("describe_spot_price_history", {"SpotPriceHistory": []})
        log = aws_refresh.refresh(pricing, {"us-east-1": ec2}, sp_client,
                                  instance_types=["g5.xlarge"], now=NOW)
        ss.assert_no_pending_responses()
    assert log.status == PriceRefresh.Status.DONE, log.message
    assert log.prices_updated == 2  # Compute plans and dedicated usage are left out
    one = Price.objects.get(instance_type="g5.xlarge", region="us-east-1", option="savings_plan",
                            term_years=1, payment="no_upfront")
    # the refreshed rate replaces the snapshot's 0.604 and says where it came from
    assert one.usd_per_hour == Decimal("0.61") and one.method == PriceMethod.SAVINGS_PLANS_API
    three = Price.objects.get(instance_type="g5.xlarge", region="us-east-1",
                              option="savings_plan", term_years=3, payment="all_upfront")
    assert three.usd_per_hour == Decimal("0.39")


def test_products_outside_aws_regions_are_left_out():
    # Local Zones and Wavelength Zones carry a regionCode too (their parent region) but a
    # different, higher price: they must not overwrite the region's price.
    doc = json.loads(price_list_item())
    doc["product"]["attributes"]["locationType"] = "AWS Local Zone"
    doc["product"]["attributes"]["location"] = "US East (Boston)"
    assert aws_refresh.parse_price_list_item(json.dumps(doc)) == []
    del doc["product"]["attributes"]["locationType"]
    assert aws_refresh.parse_price_list_item(json.dumps(doc)) == []


def ec2_client(region: str):
    return boto3.client("ec2", region_name=region, aws_access_key_id="x",
                        aws_secret_access_key="x")


@pytest.mark.django_db
def test_one_failing_spot_region_does_not_stop_the_other_parts():
    pricing, east = clients()
    cape = ec2_client("af-south-1")
    with Stubber(pricing) as ps, Stubber(east) as es, Stubber(cape) as cs:
        ps.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [
            price_list_item(), price_list_item(region="af-south-1")]})
        es.add_response("describe_spot_price_history", {"SpotPriceHistory": spot_rows()})
        cs.add_client_error("describe_spot_price_history", service_error_code="AuthFailure",
                            service_message="AWS was not able to validate the credentials",
                            http_status_code=401)
        log = aws_refresh.refresh(pricing, {"us-east-1": east, "af-south-1": cape},
                                  instance_types=["g5.xlarge"], now=NOW)
    assert log.status == PriceRefresh.Status.PARTIAL
    # 4 list offers per region (on-demand, RI 1y no/all upfront, RI 3y) + 1 us-east-1 spot
    assert log.prices_updated == 9
    parts = {p["part"]: p for p in log.parts}
    assert parts["price_list"] == {"part": "price_list", "status": "done", "prices": 8,
                                   "error": ""}
    assert parts["spot us-east-1"]["status"] == "done" and parts["spot us-east-1"]["prices"] == 1
    assert parts["spot af-south-1"]["status"] == "failed"
    assert "AuthFailure" in parts["spot af-south-1"]["error"]
    assert "spot af-south-1" in log.message and "AuthFailure" in log.message
    cape_od = Price.objects.get(region="af-south-1", instance_type="g5.xlarge",
                                option="on_demand")
    assert cape_od.usd_per_hour == Decimal("1.006") and cape_od.as_of == NOW
    assert Price.objects.get(region="us-east-1", instance_type="g5.xlarge",
                             option="spot").usd_per_hour == Decimal("0.38")
    assert not Price.objects.filter(region="af-south-1", option="spot").exists()


@pytest.mark.django_db
def test_a_part_writes_all_its_prices_or_none():
    pricing, ec2 = clients()
    rows = spot_rows()
    # A second instance type (written after g5.xlarge) whose price overflows the column: its
    # write fails, and the g5.xlarge row of the same region's part must roll back with it.
    rows.append({"AvailabilityZone": "us-east-1a", "InstanceType": "g6.xlarge",
                 "ProductDescription": "Linux/UNIX", "SpotPrice": "123456789.000000",
                 "Timestamp": NOW - dt.timedelta(hours=1)})
    with Stubber(pricing) as ps, Stubber(ec2) as es:
        ps.add_response("get_products", {"FormatVersion": "aws_v1",
                                         "PriceList": [price_list_item()]})
        ps.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []})
        es.add_response("describe_spot_price_history", {"SpotPriceHistory": rows})
        log = aws_refresh.refresh(pricing, {"us-east-1": ec2},
                                  instance_types=["g5.xlarge", "g6.xlarge"], now=NOW)
    assert log.status == PriceRefresh.Status.PARTIAL
    assert [(p["part"], p["status"]) for p in log.parts] == [
        ("price_list", "done"), ("spot us-east-1", "failed")]
    assert not Price.objects.filter(option="spot", method=PriceMethod.SPOT_HISTORY).exists()
    assert Price.objects.get(region="us-east-1", instance_type="g5.xlarge",
                             option="on_demand").as_of == NOW


@pytest.mark.django_db
def test_spot_is_queried_only_where_the_catalog_has_gpu_on_demand_prices():
    # A non-GPU price in sa-east-1 does not make that region worth a spot query.
    Price.objects.create(provider="aws", region="sa-east-1", instance_type="m5.large",
                         option="on_demand", usd_per_hour=Decimal("0.153"),
                         method=PriceMethod.PRICE_LIST_API, source="test", as_of=NOW)
    asked: list[str] = []
    stubs = []

    def client_for(region: str):
        asked.append(region)
        client = ec2_client(region)
        stub = Stubber(client)
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": []})
        stub.activate()
        stubs.append(stub)
        return client

    pricing, _ = clients()
    with Stubber(pricing) as ps:
        for _ in range(2):  # one get_products query per instance type
            ps.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []})
        log = aws_refresh.refresh(pricing, client_for, instance_types=["g5.xlarge", "m5.large"],
                                  now=NOW)
    for stub in stubs:
        stub.deactivate()
    assert log.status == PriceRefresh.Status.DONE, log.message
    # g5.xlarge has on-demand rows in these five regions of the bundled snapshot
    assert asked == ["ap-northeast-1", "eu-central-1", "eu-west-1", "us-east-1", "us-west-2"]
    # a configured list wins over the catalog
    asked.clear()
    with Stubber(pricing) as ps:
        ps.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []})
        aws_refresh.refresh(pricing, client_for, instance_types=["g5.xlarge"],
                            spot_regions=["us-west-2"], now=NOW)
    assert asked == ["us-west-2"]


@pytest.mark.django_db
def test_spot_as_of_is_when_the_refresh_saw_it_not_the_last_change():
    # AWS answers with the price in effect at StartTime: a price that has not moved for days
    # carries an old timestamp although it is today's price.
    pricing, ec2 = clients()
    with Stubber(pricing) as ps, Stubber(ec2) as es:
        ps.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []})
        es.add_response("describe_spot_price_history", {"SpotPriceHistory": spot_rows()})
        aws_refresh.refresh(pricing, {"us-east-1": ec2}, instance_types=["g5.xlarge"], now=NOW)
    spot = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="spot")
    assert spot.as_of == NOW
    assert not catalog.is_stale(spot, NOW + dt.timedelta(days=2))
    # the cheapest zone (us-east-1b) last changed at 2026-11-29 02:00 (its third point)
    assert spot.detail["last_change_at"] == "2026-11-29T02:00:00+00:00"
    assert "last changed 2026-11-29 02:00 UTC" in spot.detail["note"]


# --- Issue 8 item 7: the parsers check what the response holds against what was asked ------

def _variant(itype: str = "g5.xlarge", sku: str = SKU, **attrs) -> dict:
    """price_list_item() with other product attributes (and its own SKU)."""
    doc = json.loads(price_list_item(itype).replace(SKU, sku))
    doc["product"]["attributes"].update(attrs)
    return doc


def _refresh_price_list(items: list, spot_regions=()) -> PriceRefresh:
    pricing, _ = clients()
    with Stubber(pricing) as ps:
        ps.add_response("get_products", {"FormatVersion": "aws_v1",
                                         "PriceList": [json.dumps(i) for i in items]})
        return aws_refresh.refresh(pricing, {}, instance_types=["g5.xlarge"],
                                   spot_regions=list(spot_regions), now=NOW)


@pytest.mark.django_db
def test_a_windows_item_in_the_response_never_overwrites_the_linux_price():
    # The Linux item says $1.006/h; a Windows item of the same type (which AWS should not have
    # sent for operatingSystem=Linux) says $1.19/h. Whichever comes last, Linux's price stays.
    linux = _variant()
    windows = _variant(sku="YD2VX9XMBQJD4VVV", operatingSystem="Windows",
                       licenseModel="No License required")
    windows["terms"]["OnDemand"] = json.loads(json.dumps(windows["terms"]["OnDemand"]).replace(
        "1.0060000000", "1.1900000000"))
    byol = _variant(sku="ZZBYOL00000000001", preInstalledSw="SQL Std")
    for items in ([linux, windows, byol], [windows, byol, linux]):
        log = _refresh_price_list(items)
        assert log.status == PriceRefresh.Status.DONE, log.message
        od = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="on_demand")
        assert od.usd_per_hour == Decimal("1.006")
        assert log.prices_updated == 4  # Linux only: on-demand + 3 standard RI terms
        assert "2 price list item(s) did not match" in log.message
        [part] = log.parts
        assert any("operatingSystem='Windows'" in why for why in part["ignored"])
        assert any("preInstalledSw='SQL Std'" in why for why in part["ignored"])
    # another instance type than asked is not this type's price either
    other = _variant("p5.48xlarge")
    assert aws_refresh.parse_price_list_item(other, "g5.xlarge") == []


@pytest.mark.django_db
def test_spot_records_of_other_products_or_zones_are_not_the_linux_price():
    rows = spot_rows()
    later = dt.datetime(2026, 11, 29, 5, 0, tzinfo=dt.UTC)
    # Newer and dearer: were they counted, 1b's latest would be 0.95 and 1a's median 0.43.
    rows += [
        {"AvailabilityZone": "us-east-1b", "InstanceType": "g5.xlarge",
         "ProductDescription": "Windows", "SpotPrice": "0.950000", "Timestamp": later},
        {"AvailabilityZone": "us-east-1a", "InstanceType": "g5.xlarge",
         "ProductDescription": "Red Hat Enterprise Linux", "SpotPrice": "0.460000",
         "Timestamp": later},
        {"AvailabilityZone": "us-west-2a", "InstanceType": "g5.xlarge",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "0.100000", "Timestamp": later},
        {"AvailabilityZone": "us-east-1a", "InstanceType": "g6.xlarge",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "0.200000", "Timestamp": later},
    ]
    [s] = aws_refresh.summarise_spot("us-east-1", rows, ["g5.xlarge"])
    # Linux/UNIX in us-east-1 only: 1a 0.40/0.42/0.44 -> median 0.42; 1b 0.30/0.50/0.38 ->
    # median 0.38, latest 0.38 at 02:00
    assert (s.zone, s.median_usd_per_hour, s.latest_usd_per_hour) == (
        "us-east-1b", Decimal("0.38"), Decimal("0.38"))
    assert s.latest_at == dt.datetime(2026, 11, 29, 2, 0, tzinfo=dt.UTC)
    assert s.per_zone["us-east-1a"] == {"median": "0.420000", "latest": "0.440000",
                                        "latest_at": "2026-11-29T02:00:00+00:00", "points": 3}


def _od_dims(doc: dict) -> dict:
    [term] = doc["terms"]["OnDemand"].values()
    return term["priceDimensions"]


@pytest.mark.django_db
@pytest.mark.parametrize("break_it, message", [
    (lambda d: _od_dims(d).clear(), "term has no price dimensions"),
    (lambda d: next(iter(_od_dims(d).values()))["pricePerUnit"].update(USD=""),
     "price dimension has no USD price"),
    (lambda d: next(iter(_od_dims(d).values())).pop("pricePerUnit"),
     "price dimension has no USD price"),
    (lambda d: next(iter(_od_dims(d).values())).update(unit="Quantity"),
     "unit 'Quantity', expected 'Hrs'"),
])
def test_an_unpriceable_on_demand_term_fails_the_part_and_keeps_the_last_good_price(
        break_it, message):
    before = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="on_demand")
    doc = _variant()
    break_it(doc)
    log = _refresh_price_list([doc])
    assert log.status == PriceRefresh.Status.FAILED
    assert message in log.message and "previous prices are kept" in log.message
    assert log.prices_updated == 0
    after = Price.objects.get(pk=before.pk)
    assert (after.usd_per_hour, after.as_of) == (before.usd_per_hour, before.as_of)


def _with_partial_upfront(doc: dict, fee: str | None) -> dict:
    dims = {f"{SKU}.38NPMPTW36.6YS6EN2CT7": _dim(SKU, "38NPMPTW36", "6YS6EN2CT7", "Hrs",
                                                 "0.3050000000", "Linux/UNIX g5.xlarge")}
    if fee is not None:
        dims[f"{SKU}.38NPMPTW36.2TG2D8R56U"] = _dim(SKU, "38NPMPTW36", "2TG2D8R56U", "Quantity",
                                                    fee, "Upfront Fee")
    doc["terms"]["Reserved"][f"{SKU}.38NPMPTW36"] = {
        "priceDimensions": dims, "sku": SKU, "effectiveDate": "2025-05-01T00:00:00Z",
        "offerTermCode": "38NPMPTW36",
        "termAttributes": {"LeaseContractLength": "1yr", "OfferingClass": "standard",
                           "PurchaseOption": "Partial Upfront"}}
    return doc


def test_partial_upfront_effective_rate_includes_its_fee():
    offers = {(o.option, o.term_years, o.payment): o for o in
              aws_refresh.parse_price_list_item(_with_partial_upfront(_variant(), "2672"))}
    # 0.305 $/h + 2672 $ / 8760 h (0.305023) = 0.610023 $/h
    assert offers[("reserved", 1, "partial_upfront")].usd_per_hour == Decimal("0.610023")


@pytest.mark.django_db
def test_partial_upfront_without_its_fee_fails_the_part():
    before = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="on_demand")
    log = _refresh_price_list([_with_partial_upfront(_variant(), None)])
    assert log.status == PriceRefresh.Status.FAILED
    assert "reserved 1yr Partial Upfront: upfront fee missing" in log.message
    # nothing of the part was written: not even the item's valid on-demand price
    assert Price.objects.get(pk=before.pk).as_of == before.as_of
    assert not Price.objects.filter(option="reserved", payment="partial_upfront",
                                    method=PriceMethod.PRICE_LIST_API).exists()
