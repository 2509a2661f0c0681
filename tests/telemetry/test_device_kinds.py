"""A device's kind and vendor (issue 33): sent in the inventory by the new sources, derived
from the model name where the agent leaves them out (NVML, dcgm-exporter, older agents), and
checked like every inventory field (a bad one is a 422 naming it, nothing stored)."""

from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps

from greenops.telemetry.models import DeviceKind, Gpu, device_kind_of, devices_noun


@pytest.mark.parametrize(
    "name, kind, vendor",
    [
        ("NVIDIA H100 80GB HBM3", "gpu", "nvidia"),
        ("Tesla V100-SXM2-16GB", "gpu", "nvidia"),  # NVML's names before the NVIDIA prefix
        ("AMD Instinct MI300X", "gpu", "amd"),
        ("MI250X", "gpu", "amd"),
        ("AWS Inferentia2", "ai-asic", "aws"),
        ("AWS Trainium", "ai-asic", "aws"),
        ("Intel Gaudi 2", "ai-asic", "intel"),
        ("NVIDIA Jetson AGX Orin 64GB", "edge-soc", "nvidia"),  # a Jetson before "NVIDIA"
        ("L4", "gpu", ""),  # says nothing: a GPU of an unknown vendor
        ("", "gpu", ""),
    ],
)
def test_kind_and_vendor_from_the_model_name(name, kind, vendor):
    assert device_kind_of(name) == (kind, vendor)


def test_the_noun_follows_the_kinds():
    assert devices_noun(["gpu", "gpu"]) == "GPUs"
    assert devices_noun(["ai-asic"]) == "accelerators"
    assert devices_noun(["edge-soc"], plural=False) == "edge module"
    assert devices_noun(["gpu", "ai-asic"]) == "devices"  # a mix
    assert devices_noun([]) == "devices"
    g = Gpu(index=2, kind=DeviceKind.AI_ASIC, vendor="aws")
    assert (g.noun, g.label, g.vendor_name, g.get_kind_display()) == (
        "accelerator",
        "accelerator 2",
        "AWS",
        "AI accelerator",
    )


def post(client, token, doc):
    return client.post(
        "/api/v1/inventory",
        json.dumps(doc),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@pytest.mark.django_db
def test_inventory_takes_the_agents_kind_and_derives_the_rest(client, host):
    h, token = host
    r = post(
        client,
        token,
        {
            "gpus": [
                {"index": 0, "name": "AWS Inferentia2", "kind": "ai-asic", "vendor": "aws"},
                {"index": 1, "name": "NVIDIA A100-SXM4-40GB"},  # NVML sends no kind
                {"index": 2, "name": "Custom board", "kind": "edge-soc", "vendor": None},
            ]
        },
    )
    assert r.status_code == 200, r.content
    assert [(g["index"], g["kind"], g["vendor"]) for g in r.json()["gpus"]] == [
        (0, "ai-asic", "aws"),
        (1, "gpu", "nvidia"),
        (2, "edge-soc", ""),
    ]
    assert list(h.gpus.order_by("index").values_list("kind", "vendor")) == [
        ("ai-asic", "aws"),
        ("gpu", "nvidia"),
        ("edge-soc", ""),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "gpu, field",
    [
        ({"index": 0, "name": "x", "kind": "tpu"}, "gpus[0].kind"),
        ({"index": 0, "name": "x", "kind": 3}, "gpus[0].kind"),
        ({"index": 0, "name": "x", "vendor": "v" * 33}, "gpus[0].vendor"),
        ({"index": 0, "name": "x", "vendor": ["amd"]}, "gpus[0].vendor"),
        ({"index": 0, "name": "x", "vendor": "a\x00b"}, "gpus[0].vendor"),
    ],
)
def test_a_bad_kind_or_vendor_is_a_422_naming_it_and_nothing_changes(client, host, gpu, field):
    h, token = host
    r = post(client, token, {"gpus": [gpu]})
    assert r.status_code == 422, r.content
    assert r.json()["field"] == field
    assert h.gpus.get(index=0).name == "NVIDIA A100-SXM4-40GB"  # the factory's, untouched


@pytest.mark.django_db
def test_the_migration_labels_rows_registered_before_kinds(host):
    migration = importlib.import_module("greenops.telemetry.migrations.0016_device_kind_vendor")
    h, _ = host
    Gpu.objects.filter(host=h, index=0).update(name="AWS Trainium")  # kind left at its default
    Gpu.objects.create(host=h, index=5, name="NVIDIA Jetson AGX Orin 64GB")
    migration.derive_kinds(apps, None)
    assert list(h.gpus.order_by("index").values_list("index", "kind", "vendor")) == [
        (0, "ai-asic", "aws"),
        (1, "gpu", "nvidia"),
        (5, "edge-soc", "nvidia"),
    ]
