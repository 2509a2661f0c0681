"""Form errors in the user's words: a page names the field as its label does ("Pod name
prefix"), never the code name (match_pod_prefix), in the text a person reads."""

from __future__ import annotations

import re

import pytest

from dashboards.templatetags.readable import field_label
from tests.support.alerts import RULE_FORM


def visible_text(html: str) -> str:
    """The page's text without tags, attributes, scripts or styles."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def test_field_names_read_as_words():
    assert field_label("match_pod_prefix") == "Pod name prefix"
    assert field_label("fire_level") == "Fire level"
    assert field_label("idle_threshold_pct") == "Idle threshold (%)"  # unit suffix in words
    assert field_label("samples.power_w[3]") == "Power (W)"  # a dotted path: its last part
    assert field_label(None) == ""


@pytest.mark.django_db
def test_a_workload_form_error_names_the_pod_prefix_in_words(client, team, users):
    client.force_login(users["owner"])
    resp = client.post(
        f"/teams/{team.slug}/workloads/new/",
        {
            "name": "Ranker",
            "kind": "inference",
            "match_pod_prefix": "Ranker_Pods",
            "checkpoint_interval_min": "",
        },
    )
    assert resp.status_code in (200, 400)
    text = visible_text(resp.content.decode())
    assert "Pod name prefix" in text and "A pod name is lower-case letters" in text
    assert "match_pod_prefix" not in text and "match_" not in text


@pytest.mark.django_db
def test_an_alert_rule_error_names_the_field_in_words(client, team, users):
    client.force_login(users["owner"])
    resp = client.post(f"/teams/{team.slug}/alerts/new/", {**RULE_FORM, "fire_level": "ten"})
    assert resp.status_code == 400
    text = visible_text(resp.content.decode())
    assert "Not saved — Fire level: must be a number" in " ".join(text.split())
    assert "fire_level" not in text


@pytest.mark.django_db
def test_a_variant_pair_error_names_the_field_in_words(client, team, users):
    client.force_login(users["owner"])
    resp = client.post(
        f"/teams/{team.slug}/advisor/variants/new",
        {"label": "batch 8 vs 32", "a": "no-such-workload", "b": ""},
    )
    assert resp.status_code == 400
    text = " ".join(visible_text(resp.content.decode()).split())
    assert "Variant A: " in text  # field "a" of the error, as the form calls it
