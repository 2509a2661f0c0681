"""The bundled GCP and Azure price snapshot: loaded by its migrations, every row cited, and found
for GCP and Azure hosts by the same lookup that prices AWS hosts."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from greenops.costs.catalog import DATA_DIR, SNAPSHOTS, host_price, is_stale
from greenops.costs.models import InstanceType, Price, PriceMethod
from greenops.telemetry.models import PurchaseOption
from tests.support.factories import make_host

CLOUD = DATA_DIR / "cloud_prices_2025-01-01.json"
SKYPILOT_GCP = ("https://github.com/skypilot-org/skypilot-catalog/blob/"
                "006059e0f18acb1341e22a27751e9f80df6ba92f/catalogs/v8/gcp/vms.csv")
SKYPILOT_AZURE = ("https://github.com/coopslarhette/skypilot-catalog/blob/"
                  "20291d7eda23e6f420cd9586558cf0bc4051851c/catalogs/v8/azure/vms.csv")


def test_cloud_snapshot_is_bundled_and_every_row_is_cited():
    assert CLOUD in SNAPSHOTS
    doc = json.loads(CLOUD.read_text())
    assert doc["metadata"]["as_of"] and doc["metadata"]["providers"] == ["gcp", "azure"]
    # Azure now ships; what it leaves out is still listed
    assert "azure" not in doc["metadata"]["not_included"]
    assert doc["metadata"]["not_included"]["Standard_ND96isr_H100_v5 spot"]
    for row in doc["prices"]:
        assert row["provider"] in ("gcp", "azure"), row
        assert row["source"] and len(row["source"]) <= 300, row
        assert row["as_of"] and "lower bound" in row["confidence"], row
    for spec in doc["instance_types"].values():
        assert spec["provider"] in ("gcp", "azure")


def test_gcp_rows_loaded_per_provider(db):
    gcp = Price.objects.filter(provider="gcp")
    # 7 instance types x 2-3 regions x (on-demand + spot)
    assert gcp.filter(option="on_demand").count() == 20
    assert gcp.filter(option="spot").count() == 20
    assert InstanceType.objects.filter(provider="gcp").count() == 7
    a3 = InstanceType.objects.get(provider="gcp", name="a3-highgpu-8g")
    assert (a3.gpu_model, a3.gpu_count, a3.gpu_memory_gib) == ("NVIDIA H100 80GB", 8, 80)
    assert all(p.method == PriceMethod.SNAPSHOT and p.source == SKYPILOT_GCP for p in gcp)
    assert all(p.detail["snapshot"] == CLOUD.name and p.detail["confidence"] for p in gcp)
    # AWS rows are untouched by the multi-provider file
    assert not Price.objects.filter(provider="aws", detail__snapshot=CLOUD.name).exists()


def test_gcp_spot_row_is_vm_plus_gpus_and_dated_by_its_lower_bound(db):
    spot = Price.objects.get(provider="gcp", region="us-east4", instance_type="a3-highgpu-8g",
                             option="spot")
    # host VM Spot 2.15966 + 8 x H100 Spot 17.8848, both copied from the catalog
    assert spot.usd_per_hour == Decimal("20.04446")
    assert spot.interruption_band == ""  # GCP publishes no band; none is claimed
    assert spot.as_of.date() == dt.date(2025, 1, 1) and is_stale(spot)
    od = Price.objects.get(provider="gcp", region="us-east4", instance_type="a3-highgpu-8g",
                           option="on_demand")
    assert od.usd_per_hour == Decimal("87.83247") and spot.usd_per_hour < od.usd_per_hour
    # a region whose catalog figures looked like a mismatched SKU is left out, not guessed
    assert not Price.objects.filter(provider="gcp", region="us-central1",
                                    instance_type="a3-highgpu-8g").exists()


def test_gcp_host_is_priced_from_the_snapshot(team):
    host, _ = make_host(team, name="gcp-l4-1", gpus=1)
    host.provider, host.region, host.instance_type = "gcp", "us-central1", "g2-standard-4"
    host.purchase_option = PurchaseOption.ON_DEMAND
    host.save()
    found = host_price(host)
    assert found.usd_per_hour == pytest.approx(0.70683)  # VM 0.14679 + L4 0.56004
    assert found.source == SKYPILOT_GCP and found.stale is True
    host.purchase_option = PurchaseOption.SPOT
    host.save()
    assert host_price(host).usd_per_hour == pytest.approx(0.28184)  # 0.05874 + 0.2231
    # the same name under another provider is not borrowed
    host.provider = "aws"
    host.save()
    assert host_price(host).code == "unknown_instance_type"


def test_snapshot_does_not_overwrite_a_newer_gcp_price(db):
    from greenops.costs.catalog import load_snapshot

    p = Price.objects.get(provider="gcp", region="europe-west4", instance_type="g2-standard-48",
                          option="on_demand")
    p.usd_per_hour, p.as_of = Decimal("3.99"), dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    p.save()
    load_snapshot(CLOUD)
    assert Price.objects.get(pk=p.pk).usd_per_hour == Decimal("3.99")


def test_azure_rows_loaded_per_provider(db):
    azure = Price.objects.filter(provider="azure")
    # 6 sizes x 3 US regions on-demand; spot for all but ND96isr_H100_v5
    assert azure.filter(option="on_demand").count() == 18
    assert azure.filter(option="spot").count() == 15
    assert InstanceType.objects.filter(provider="azure").count() == 6
    assert all(p.method == PriceMethod.SNAPSHOT and p.source == SKYPILOT_AZURE for p in azure)
    assert all(p.detail["snapshot"] == CLOUD.name and "lower bound" in p.detail["confidence"]
               for p in azure)
    assert all(p.as_of.date() == dt.date(2023, 11, 1) for p in azure)
    assert all(s.usd_per_hour < Price.objects.get(
        provider="azure", region=s.region, instance_type=s.instance_type,
        option="on_demand").usd_per_hour for s in azure.filter(option="spot"))
    # the catalog's "H100 x12" is a catalog error; Azure's size docs give 8 GPUs, 640 GB in all
    nd = InstanceType.objects.get(provider="azure", name="Standard_ND96isr_H100_v5")
    assert (nd.gpu_model, nd.gpu_count, nd.gpu_memory_gib) == ("NVIDIA H100 80GB", 8, 80)
    # its catalog SpotPrice equals on-demand, so no spot row is claimed
    assert not azure.filter(instance_type="Standard_ND96isr_H100_v5", option="spot").exists()
    assert azure.get(region="westus", instance_type="Standard_ND96isr_H100_v5").usd_per_hour \
        == Decimal("127.816")
    # the same GCP and AWS rows as before: no Azure name leaks into another provider
    assert not Price.objects.exclude(provider="azure").filter(
        instance_type__startswith="Standard_").exists()


def test_azure_host_is_priced_from_the_snapshot(team):
    host, _ = make_host(team, name="azure-a100-1", gpus=1)
    host.provider, host.region = "azure", "eastus"
    host.instance_type = "Standard_NC24ads_A100_v4"
    host.purchase_option = PurchaseOption.ON_DEMAND
    host.save()
    found = host_price(host)
    assert found.usd_per_hour == pytest.approx(3.673)
    assert found.source == SKYPILOT_AZURE and found.stale is True
    host.purchase_option = PurchaseOption.SPOT
    host.save()
    spot = host_price(host)
    assert spot.usd_per_hour == pytest.approx(0.444433) and spot.price.interruption_band == ""
    # a region the snapshot does not carry is reported missing, not borrowed from another
    host.region = "westeurope"
    host.save()
    assert host_price(host).code == "missing_price"
    host.provider, host.region = "gcp", "eastus"
    host.save()
    assert host_price(host).code == "unknown_instance_type"


def test_migration_0006_reloads_azure_rows_without_overwriting_newer(db):
    import importlib

    from django.apps import apps as django_apps

    migration = importlib.import_module(
        "greenops.costs.migrations.0006_load_cloud_price_snapshot_azure")
    Price.objects.filter(provider="azure").exclude(region="eastus2").delete()
    InstanceType.objects.filter(provider="azure", name="Standard_NV36ads_A10_v5").delete()
    newer = Price.objects.get(provider="azure", region="eastus2",
                              instance_type="Standard_NC4as_T4_v3", option="on_demand")
    newer.usd_per_hour, newer.as_of = Decimal("0.5"), dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    newer.save()
    migration.load(django_apps, None)
    migration.load(django_apps, None)  # idempotent
    assert Price.objects.filter(provider="azure").count() == 33
    assert InstanceType.objects.filter(provider="azure").count() == 6
    assert Price.objects.get(pk=newer.pk).usd_per_hour == Decimal("0.5")
    assert Price.objects.filter(provider="gcp").count() == 40
