"""Interruption bands loaded from the Spot Instance Advisor's data file reach the spot advice."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from greenops.costs import spot_advisor
from greenops.costs.models import Price, PriceOption

ADVISOR = {
    "ranges": [{"index": 0, "label": "<5%", "dots": 0, "max": 5},
               {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
               {"index": 2, "label": "10-15%", "dots": 2, "max": 16},
               {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
               {"index": 4, "label": ">20%", "dots": 4, "max": 100}],
    "spot_advisor": {
        "us-east-1": {"Linux": {"p5.48xlarge": {"s": 70, "r": 3}, "g5.xlarge": {"s": 60, "r": 0}},
                      "Windows": {"p5.48xlarge": {"s": 50, "r": 4}}},
        "eu-west-1": {"Linux": {"p4d.24xlarge": {"s": 65, "r": 1}}},
    },
}


def test_parse_reads_linux_bands():
    bands = spot_advisor.parse(ADVISOR)
    assert bands == {("us-east-1", "p5.48xlarge"): "15-20%", ("us-east-1", "g5.xlarge"): "<5%",
                     ("eu-west-1", "p4d.24xlarge"): "5-10%"}
    assert spot_advisor.parse(ADVISOR, "Windows") == {("us-east-1", "p5.48xlarge"): ">20%"}


@pytest.mark.parametrize("doc", [{}, {"ranges": [{"index": 0, "label": "sometimes"}],
                                      "spot_advisor": {}}, [], {"ranges": 3}])
def test_bad_files_are_refused(doc):
    with pytest.raises(spot_advisor.AdvisorError):
        spot_advisor.parse(doc)


@pytest.mark.django_db
def test_command_sets_bands_on_bundled_spot_prices(tmp_path):
    spot = Price.objects.filter(provider="aws", option=PriceOption.SPOT,
                                region="us-east-1", instance_type="p5.48xlarge").first()
    assert spot is not None and spot.interruption_band == ""  # the bundled snapshot has none
    path = tmp_path / "spot-advisor-data.json"
    path.write_text(json.dumps(ADVISOR))
    call_command("load_spot_advisor", str(path))
    spot.refresh_from_db()
    assert spot.interruption_band == "15-20%"
    assert spot.detail["interruption_band_source"] == spot_advisor.SOURCE
    path.write_text("{not json")
    with pytest.raises(CommandError):
        call_command("load_spot_advisor", str(path))


def test_a_known_band_is_not_called_assumed():
    from greenops.costs.recommend import WorkloadTraits, spot_fit

    traits = WorkloadTraits("train", "training", True, 30, False)
    known = spot_fit(traits, 10.0, 4.0, "5-10%", 730.0, 100.0, 400.0)
    assumed = spot_fit(traits, 10.0, 4.0, "", 730.0, 100.0, 400.0)
    assert "assumed" not in known.reasoning and "assumed" in assumed.reasoning
    assert known.monthly_usd_saved > assumed.monthly_usd_saved  # a lower band costs less redo
