"""The DaemonSet manifest and the Helm chart under deploy/: every YAML parses, every object is
valid against Kubernetes' own schemas (kubernetes-validate bundles them: no cluster needed), and
both name the socket path and the directory the agent asks the kubelet on.

No helm binary is at hand, so the chart is rendered here by a small renderer that knows exactly
the template forms the chart uses ({{ .Values.x }}, {{ .Release.Name }}, | quote, toYaml |
nindent N, if / end) and refuses any other: a template that grows beyond them fails this test
until it is checked another way."""

from __future__ import annotations

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from collectors.podresources import SOCKET_PATH

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kubernetes" / "daemonset.yaml"
CHART = ROOT / "deploy" / "helm" / "greenops-agent"
K8S_VERSION = "1.32"
SOCKET_DIR = SOCKET_PATH.rsplit("/", 1)[0]
TAG = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def _lookup(path: str, ctx: dict):
    if not path.startswith("."):
        raise ValueError(f"unsupported template expression {path!r}")
    node = ctx
    for part in path[1:].split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{path}: no {part!r}")
        node = node[part]
    return node


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _evaluate(expr: str, ctx: dict) -> str:
    parts = [p.strip() for p in expr.split("|")]
    head = parts[0].split()
    if len(head) == 2 and head[0] == "toYaml":
        text = yaml.safe_dump(
            _lookup(head[1], ctx), default_flow_style=False, sort_keys=False
        ).rstrip("\n")
    elif len(head) == 1:
        text = _scalar(_lookup(head[0], ctx))
    else:
        raise ValueError(f"unsupported template expression {expr!r}")
    for pipe in parts[1:]:
        words = pipe.split()
        if words == ["quote"]:
            text = json.dumps(text)
        elif len(words) == 2 and words[0] == "nindent":
            pad = " " * int(words[1])
            text = "\n" + "\n".join(pad + line for line in text.splitlines())
        else:
            raise ValueError(f"unsupported pipe {pipe!r}")
    return text


def render(
    template: str,
    values: dict,
    release: str = "greenops-agent",
    namespace: str = "greenops",
    chart: dict | None = None,
) -> str:
    chart = chart or {}
    ctx = {
        "Values": values,
        "Release": {"Name": release, "Namespace": namespace},
        "Chart": {
            "Name": chart.get("name"),
            "Version": chart.get("version"),
            "AppVersion": chart.get("appVersion"),
        },
    }
    out: list[str] = []
    active: list[bool] = []
    pos = 0
    trim_next = False
    for m in TAG.finditer(template):
        text = template[pos : m.start()]
        if trim_next:
            text = text.lstrip()
        if all(active):
            out.append(text)
        if m.group(1):  # {{- trims the whitespace before it
            while out and not out[-1].strip():
                out.pop()
            if out:
                out[-1] = out[-1].rstrip()
        trim_next = bool(m.group(3))
        expr = m.group(2)
        if expr.startswith("if "):
            active.append(bool(_lookup(expr[3:].strip(), ctx)) if all(active) else False)
        elif expr == "end":
            active.pop()
        elif expr.startswith("/*"):
            pass
        elif all(active):
            out.append(_evaluate(expr, ctx))
        pos = m.end()
    assert not active, "an if without its end"
    tail = template[pos:]
    out.append(tail.lstrip() if trim_next else tail)
    return "".join(out)


def chart_values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def render_chart(values: dict) -> list[dict]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    docs = []
    for path in sorted((CHART / "templates").glob("*.yaml")):
        text = render(path.read_text(), values, chart=chart)
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def agent_parts(docs: list[dict]) -> tuple[dict, dict]:
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    return spec, next(c for c in spec["containers"] if c["name"] == "agent")


def check_agent(docs: list[dict]) -> None:
    """What any way of deploying the agent must get right."""
    for d in docs:
        assert kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    spec, agent = agent_parts(docs)
    env = {e["name"]: e.get("value") for e in agent["env"]}
    # the agent asks the same socket it reads by default, inside the mounted directory
    assert env["GREENOPS_POD_RESOURCES"] == SOCKET_PATH
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts["pod-resources"]["mountPath"] == SOCKET_DIR
    assert mounts["pod-resources"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == SOCKET_DIR
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # it must not take a GPU from the workloads it measures
    assert not any("gpu" in k for k in agent["resources"].get("limits", {}))
    assert agent["resources"]["requests"]["memory"] == "128Mi"
    assert volumes["enroll"]["secret"]["secretName"] == "greenops-agent-enroll"
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["automountServiceAccountToken"] is False  # it reads no Kubernetes API


def test_the_daemonset_manifest_is_valid_and_names_the_agents_socket():
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert [d["kind"] for d in docs] == ["Namespace", "ServiceAccount", "DaemonSet"]
    check_agent(docs)


def test_the_chart_renders_with_its_defaults():
    docs = render_chart(chart_values())
    assert sorted(d["kind"] for d in docs) == ["DaemonSet", "ServiceAccount"]  # no secret
    check_agent(docs)
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["metadata"]["labels"]["app.kubernetes.io/version"] == "0.1.0"
    _, agent = agent_parts(docs)
    assert agent["image"] == "ghcr.io/greenops/greenops-agent:0.1.0"


def test_the_chart_substitutes_values_and_makes_the_enrollment_secret():
    values = chart_values()
    values["enrollment"].update(
        create=True,
        server="https://greenops.example",
        tokens={"gpu-node-a": "gen_abc", "gpu-node-b": "gen_def"},
    )
    values["image"]["tag"] = "0.2.0"
    values["resources"]["limits"]["memory"] = "1Gi"
    docs = render_chart(values)
    check_agent(docs)
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert secret["stringData"] == {
        "server": "https://greenops.example",
        "gpu-node-a": "gen_abc",
        "gpu-node-b": "gen_def",
    }
    _, agent = agent_parts(docs)
    assert agent["image"].endswith(":0.2.0")
    assert agent["resources"]["limits"]["memory"] == "1Gi"


def test_a_moved_kubelet_directory_moves_mount_and_socket_together():
    values = chart_values()
    values["podResources"]["hostDir"] = "/var/lib/k0s/kubelet/pod-resources"
    spec, agent = agent_parts(render_chart(values))
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["GREENOPS_POD_RESOURCES"] == "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"
    assert {m["mountPath"] for m in agent["volumeMounts"]} >= {"/var/lib/k0s/kubelet/pod-resources"}


def test_the_checks_can_fail():
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    ds = docs[2]
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # a typo'd field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)
    with pytest.raises(ValueError, match="unsupported"):
        render('{{ include "x" . }}', {})
    with pytest.raises(KeyError):
        render("{{ .Values.nope }}", {})
