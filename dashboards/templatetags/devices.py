"""What pages call a device and a set of devices (issue 33): "GPU" only for a GPU."""

from __future__ import annotations

from django import template

from greenops.telemetry.models import devices_noun as _devices_noun

register = template.Library()


@register.filter
def devices_noun(gpus) -> str:
    """A list of Gpu rows (or of their kinds) -> "GPUs", "accelerators", "edge modules", or
    "devices" for a mix or none."""
    return _devices_noun(getattr(g, "kind", g) for g in gpus)


@register.filter
def device_noun(gpus) -> str:
    """The singular: "GPU" when every device is a GPU, "device" for a mix."""
    return _devices_noun((getattr(g, "kind", g) for g in gpus), plural=False)
