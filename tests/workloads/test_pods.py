"""Kubernetes pods as workloads, end to end: a fake kubelet's PodResources socket -> the agent's
host-activity batches -> POST /api/v1/host-samples -> seconds held per pod and hour ->
greenops.workloads.pods.rollup -> the pods page and GET /api/v1/teams/{slug}/pods.

The node (team Vision): 2 GPUs, $8/h on demand (so $4 per GPU-hour), PUE 1.5, 400 g/kWh.
In the last finished hour H:  GPU 0 measured 1,440,000 J (0.4 kWh), GPU 1 720,000 J (0.2 kWh).
The kubelet says (the agent asks every 45 s and snapshots every 180 s, as in production:
collectors.host_activity PROCESS_EVERY x the reading interval):
  [H, H+30 min)        GPU 0: ml-train/train-0 (trainer)    GPU 1: ml-serve/bert (triton)
  [H+30, H+45 min)     GPU 0: ml-serve/bert (triton)        GPU 1: scratch/notebook-0 (jupyter)
  [H+45, H+60 min)     GPU 0: ml-serve/bert (triton)        GPU 1: nobody
Per GPU-hour: GPU 0 0.4 kWh x 1.5 = 0.6 kWh x 400 g = 240 g;  $8 x 1 h / 2 GPUs = $4
              GPU 1 0.2 kWh x 1.5 = 0.3 kWh x 400 g = 120 g;  $4
  train-0:   1/2 of GPU 0          = 720,000 J, $2, 0.120 kg
  bert:      1/2 of GPU 0 + 1/2 of GPU 1 = 720,000 + 360,000 = 1,080,000 J, $2 + $2 = $4,
             0.120 + 0.060 = 0.180 kg
  notebook:  1/4 of GPU 1          = 180,000 J, $1, 0.030 kg   (namespace scratch: unmapped)
  no pod:    1/4 of GPU 1          = 180,000 J, $1, 0.030 kg
  total:     2,160,000 J, $8, 0.360 kg = the node's hour.
ml-serve is mapped to team Speech, ml-train to Vision; Speech sees bert alone.
"""

from __future__ import annotations

import datetime as dt
import uuid

import orjson
import pytest
from django.utils import timezone

from collectors.host_activity import Counters, HostActivityChannel, gpu_processes
from collectors.podresources import PodAttribution, WithPods
from greenops.carbon.models import HostSite, Site
from greenops.teams.models import Membership, Role
from greenops.telemetry import pod_hours
from greenops.telemetry.models import GpuPodHour, GpuProcess, Host
from greenops.windows import HOUR, floor_hour
from greenops.workloads import pods
from greenops.workloads.models import NamespaceTeam, PodHour, Workload
from tests.support.costs import only_prices
from tests.support.factories import make_batch, make_host
from tests.support.kubelet import FakeKubelet, answer, ctr, pod

pytestmark = pytest.mark.django_db

BERT = "bert-7f9c6d5b4-abcde"


@pytest.fixture
def kubelet():
    fake = FakeKubelet().start()
    yield fake
    fake.close()


@pytest.fixture
def node(team):
    """The node, priced and sited, enrolled a day before H."""
    now = timezone.now()
    h = floor_hour(now) - HOUR
    host, token = make_host(team, "k8s-gpu-1")
    Host.objects.filter(pk=host.pk).update(created_at=h - dt.timedelta(days=1))
    host.refresh_from_db()
    only_prices(on_demand="8")
    site = Site.objects.create(
        team=team,
        name="dc-1",
        pue=1.5,
        grid_intensity_override_g_per_kwh=400.0,
        override_source="test",
    )
    HostSite.objects.create(host=host, site=site)
    return {"host": host, "token": token, "H": h, "now": now}


def send_gpu_energy(post_batch, node, per_gpu_j: tuple[float, float]) -> None:
    """The GPU samples: a baseline at H+1 min and one reading at H+59 min per GPU."""
    h = node["H"].timestamp()
    doc = make_batch(n_per_gpu=2, gpus=(0, 1), start=h + 60, step=3480)
    doc["samples"]["energy_j"] = [None, per_gpu_j[0], None, per_gpu_j[1]]
    doc["samples"]["power_w"] = [None, per_gpu_j[0] / 3480, None, per_gpu_j[1] / 3480]
    r = post_batch(node["token"], doc)
    assert r.status_code == 202, r.content


class Spool:
    """What HostActivityChannel.seal puts: POSTed at once, as the shipper would."""

    def __init__(self, client, token):
        self.client, self.token, self.answers = client, token, []

    def put(self, batch_id, payload, n, path):
        r = self.client.post(
            path,
            payload,
            content_type="application/json",
            HTTP_CONTENT_ENCODING="gzip",
            HTTP_AUTHORIZATION=f"Bearer {self.token}",
        )
        assert r.status_code == 200, r.content
        self.answers.append(r.json())


def kubelet_at(kubelet, minute: float, uuids: list[str]) -> None:
    g0, g1 = uuids
    if minute < 30:
        kubelet.answer = answer(
            pod("ml-train", "train-0", ctr("trainer", "nvidia.com/gpu", g0)),
            pod("ml-serve", BERT, ctr("triton", "nvidia.com/gpu", g1)),
        )
    elif minute < 45:
        kubelet.answer = answer(
            pod("ml-serve", BERT, ctr("triton", "nvidia.com/gpu", g0)),
            pod("scratch", "notebook-0", ctr("jupyter", "nvidia.com/gpu", g1)),
        )
    else:
        kubelet.answer = answer(pod("ml-serve", BERT, ctr("triton", "nvidia.com/gpu", g0)))


class Source:
    """The node's GPU source as the agent has it (its inventory); no NVML processes."""

    def __init__(self, host):
        self._gpus = list(host.gpus.order_by("index"))

    def gpus(self):
        return self._gpus


def run_agent_hour(client, node, kubelet) -> Spool:
    """Readings every 45 s from H to H+60:45; a snapshot every 4th reading (every 180 s)."""
    host, h = node["host"], node["H"].timestamp()
    source = Source(host)
    uuids = [g.uuid for g in source.gpus()]
    clock = {"t": h}
    with_pods = WithPods(source, PodAttribution(source.gpus(), kubelet.path))
    channel = HostActivityChannel(
        read=lambda: Counters(*(int(clock["t"]),) * 6),
        processes=lambda: gpu_processes(with_pods, [0, 1]),
        clock=lambda: clock["t"],
        monotonic=lambda: clock["t"],
    )
    spool = Spool(client, node["token"])
    for i in range(82):  # H+0 ... H+60:45
        clock["t"] = h + 45 * i
        kubelet_at(kubelet, 45 * i / 60, uuids)
        channel.read_once()
        if i % 4 == 1:
            channel.seal(spool)
    return spool


@pytest.fixture
def attributed(client, post_batch, node, kubelet, team, other_team):
    send_gpu_energy(post_batch, node, (1_440_000.0, 720_000.0))
    run_agent_hour(client, node, kubelet)
    NamespaceTeam.objects.create(owner=team, namespace="ml-serve", team=other_team)
    NamespaceTeam.objects.create(owner=team, namespace="ml-train", team=team)
    pods.rollup(node["H"], node["H"] + HOUR, node["now"])
    return node


def by_pod(rows):
    return {(r["namespace"], r["pod"]): r for r in rows}


def test_seconds_held_per_pod_come_from_the_agents_snapshots(attributed):
    held = {
        (r.gpu.index, r.pod): r.held_s
        for r in GpuPodHour.objects.filter(bucket=attributed["H"]).select_related("gpu")
    }
    # GPU 0: train-0 for snapshots at 0..27 min (10 x 180 s), bert for 30..57 min (10 x 180 s)
    # GPU 1: bert 10 x 180 s, the notebook at 30, 33, 36, 39, 42 min (5 x 180 s)
    assert held == {
        (0, "train-0"): 1800.0,
        (0, BERT): 1800.0,
        (1, BERT): 1800.0,
        (1, "notebook-0"): 900.0,
    }
    # The latest snapshot (H+60 min) is the host's GpuProcess: bert on GPU 0.
    assert list(GpuProcess.objects.values_list("pod", flat=True)) == [BERT]


def test_each_pods_energy_cost_and_co2e_by_hand(attributed, client, users):
    client.force_login(users["owner"])
    body = client.get("/api/v1/teams/vision/pods?range=day").json()
    rows = by_pod(body["pods"])
    train, bert = rows[("ml-train", "train-0")], rows[("ml-serve", BERT)]
    note, idle = rows[("scratch", "notebook-0")], rows[(None, None)]
    assert train["energy_j"] == pytest.approx(720_000)
    assert train["cost_usd"] == pytest.approx(2.0)
    assert train["co2e_kg"] == pytest.approx(0.120)
    assert train["team"] == "Vision" and train["container"] == "trainer"
    assert bert["energy_j"] == pytest.approx(1_080_000)
    assert bert["cost_usd"] == pytest.approx(4.0)
    assert bert["co2e_kg"] == pytest.approx(0.180)
    assert bert["gpu_hours"] == pytest.approx(1.0)  # two half hours on two GPUs
    assert bert["team"] == "Speech"
    assert note["energy_j"] == pytest.approx(180_000) and note["cost_usd"] == pytest.approx(1.0)
    assert note["co2e_kg"] == pytest.approx(0.030)
    assert note["team"] == pods.UNMAPPED  # never silently dropped
    assert idle["held_by"] == "no pod" and idle["energy_j"] == pytest.approx(180_000)
    assert idle["cost_usd"] == pytest.approx(1.0) and idle["co2e_kg"] == pytest.approx(0.030)
    # The rows add up to the node's hour: 2,160,000 J, $8, 0.36 kg.
    assert body["total"]["energy_j"] == pytest.approx(2_160_000)
    assert body["total"]["cost_usd"] == pytest.approx(8.0)
    assert body["total"]["co2e_kg"] == pytest.approx(0.360)
    assert sum(r["energy_j"] for r in body["pods"]) == pytest.approx(2_160_000)
    ns = {n["namespace"]: n for n in body["namespaces"]}
    assert (
        ns["ml-serve"]["cost_usd"] == pytest.approx(4.0) and ns["scratch"]["team"] == pods.UNMAPPED
    )
    # The page: the same rows and figures.
    html = client.get("/teams/vision/workloads/pods/?range=day").content.decode()
    assert BERT in html and "notebook-0" in html and pods.UNMAPPED in html
    # bert: 1,080,000 J = 0.300 kWh, $4.00, 0.180 kg; the total 0.600 kWh, $8.00, 0.360 kg
    assert 'data-energy-j="1080000.0"' in html
    assert "0.300" in html and "4.00" in html and "0.180" in html
    assert "0.600 kWh" in html and "$8.00" in html and "0.360 kg" in html


def test_a_mapped_team_sees_only_its_namespaces_pods(attributed, client, users):
    client.force_login(users["outsider"])  # owner of Speech, not in Vision
    body = client.get("/api/v1/teams/speech/pods?range=day").json()
    assert [(r["namespace"], r["pod"]) for r in body["pods"]] == [("ml-serve", BERT)]
    assert body["total"]["cost_usd"] == pytest.approx(4.0)
    assert body["total"]["energy_j"] == pytest.approx(1_080_000)
    html = client.get("/teams/speech/workloads/pods/").content.decode()
    assert BERT in html and "train-0" not in html and "notebook-0" not in html
    assert "no pod" not in html.split("<h2>Pods</h2>")[1].split("</table>")[0]
    # ... and nothing of Vision's own pages or API.
    assert client.get("/teams/vision/workloads/pods/").status_code in (403, 404)
    assert client.get("/api/v1/teams/vision/pods").status_code in (403, 404)


def test_a_pod_matching_a_workload_rule_names_it(attributed, client, users, team):
    """Pods appear as workloads: a workload's namespace/prefix rule names its pods."""
    Workload.objects.create(
        team=team,
        name="Training",
        kind="training",
        match_namespace="ml-train",
        match_pod_prefix="train-",
    )
    client.force_login(users["owner"])
    rows = by_pod(client.get("/api/v1/teams/vision/pods").json()["pods"])
    assert rows[("ml-train", "train-0")]["workload"] == "training"
    assert rows[("ml-serve", BERT)]["workload"] is None


def test_no_price_makes_each_cost_unknown_with_the_reason(client, post_batch, node, kubelet, users):
    send_gpu_energy(post_batch, node, (1_440_000.0, 720_000.0))
    run_agent_hour(client, node, kubelet)
    only_prices()  # nothing for p4d.24xlarge
    pods.rollup(node["H"], node["H"] + HOUR, node["now"])
    client.force_login(users["owner"])
    body = client.get("/api/v1/teams/vision/pods").json()
    assert body["total"]["cost_usd"] is None and body["total"]["cost_reason"]
    assert all(r["cost_usd"] is None for r in body["pods"])
    assert body["total"]["energy_j"] == pytest.approx(2_160_000)  # energy is still known
    html = client.get("/teams/vision/workloads/pods/").content.decode()
    assert "unknown (" in html


def test_rollup_is_idempotent_and_only_finished_hours(attributed):
    """Run again, the rollup replaces what it wrote; the running hour is never rolled up."""
    before = sorted(PodHour.objects.values_list("pod", "energy_j"))
    pods.rollup(attributed["H"], attributed["H"] + HOUR, attributed["now"])
    assert sorted(PodHour.objects.values_list("pod", "energy_j")) == before
    current = floor_hour(attributed["now"])
    pods.rollup(current, current + HOUR, attributed["now"])  # the running hour: nothing
    assert not PodHour.objects.filter(bucket=current).exists()


def test_mapping_a_namespace_needs_an_admin_and_a_team_they_are_in(client, users, team, other_team):
    client.force_login(users["owner"])
    url = "/teams/vision/workloads/pods/namespaces/"
    r = client.post(url, {"namespace": "Bad_NS", "team": "vision"})
    # Refused on the pods page itself, in the form's words.
    page = r.content.decode()
    assert r.status_code == 400 and 'id="map-error">Not mapped — Namespace: a Kubernetes' in page
    r = client.post(url, {"namespace": "ml-serve", "team": "speech"})  # not a member of Speech
    assert r.status_code == 400 and b"Team: choose a team you are a member of." in r.content
    assert not NamespaceTeam.objects.exists()
    Membership.objects.create(team=other_team, user=users["owner"], role=Role.MEMBER)
    assert client.post(url, {"namespace": "ml-serve", "team": "speech"}).status_code == 302
    assert NamespaceTeam.objects.get().team == other_team
    client.force_login(users["member"])  # a member of Vision may read, not map
    assert client.post(url, {"namespace": "x", "team": "vision"}).status_code == 403


def test_credit_is_capped_split_at_the_hour_and_shared(team):
    host, _ = make_host(team, "n", gpus=1)
    gpu = host.gpus.get()
    h = floor_hour(timezone.now()) - HOUR
    prev = [
        GpuProcess(host=host, gpu=gpu, seen_at=h, namespace="a", pod="p", container="c"),
        GpuProcess(host=host, gpu=gpu, seen_at=h, namespace="a", pod="q", container="c"),
        GpuProcess(host=host, gpu=gpu, seen_at=h, pid=7, name="python3"),
    ]  # not a pod
    # 100 s before the hour's end to 60 s after: 160 s, two pods at once -> 80 s each,
    # 50 s in H and 30 s in H+1 each.
    pod_hours.credit(
        host, prev, h + HOUR - dt.timedelta(seconds=100), h + HOUR + dt.timedelta(seconds=60)
    )
    got = sorted(GpuPodHour.objects.values_list("pod", "bucket", "held_s"))
    assert got == [("p", h, 50.0), ("p", h + HOUR, 30.0), ("q", h, 50.0), ("q", h + HOUR, 30.0)]
    # A host that went quiet for 20 min books 180 s at most: 90 s each.
    GpuPodHour.objects.all().delete()
    pod_hours.credit(host, prev, h, h + dt.timedelta(minutes=20))
    assert sorted(GpuPodHour.objects.values_list("pod", "held_s")) == [("p", 90.0), ("q", 90.0)]


def test_a_replayed_or_older_snapshot_credits_nothing_twice(client, team):
    host, token = make_host(team, "n", gpus=1)
    h = floor_hour(timezone.now()) - HOUR

    def post(t: float, pod_name: str, batch_id: str | None = None):
        doc = {
            "batch_id": batch_id or str(uuid.uuid4()),
            "agent_version": "0.1.0",
            "samples": {
                "ts": [t],
                "interval_s": [15.0],
                "cpu_util_pct": [None],
                "net_rx_bytes_s": [None],
                "net_tx_bytes_s": [None],
                "disk_read_bytes_s": [None],
                "disk_write_bytes_s": [None],
            },
            "processes": {
                "ts": t,
                "gpus": [{"gpu_index": 0, "namespace": "a", "pod": pod_name, "container": "c"}],
            },
        }
        return client.post(
            "/api/v1/host-samples",
            orjson.dumps(doc),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    t0 = h.timestamp() + 600
    assert post(t0, "p").status_code == 200
    second = str(uuid.uuid4())
    assert post(t0 + 60, "p", second).status_code == 200  # p held [t0, t0+60)
    assert post(t0 + 60, "p", second).status_code == 200  # the replay
    assert post(t0 + 30, "old").status_code == 200  # an older snapshot arriving late
    assert list(GpuPodHour.objects.values_list("pod", "held_s")) == [("p", 60.0)]
