"""The drop-in CI files run as CI would run them: the GitHub composite action's steps and the
GitLab template's script, with bash, on a real git checkout, the fake NVML, and (for the
merge-request note) a fake GitLab API on loopback."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import yaml

from tests.support.bench_fakes import write_profile

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / ".github/actions/greenops-gate/action.yml"
GITLAB = ROOT / "ci/gitlab/greenops-gate.yml"
FAKE_ARGS = ("--nvml-lib tests.support.bench_fakes --no-host-energy --count 1000 --warmup 0 "
             "--repeat 5 "
             "--tolerance throughput_per_s=100 --spool-dir {spool}")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   cwd=repo, check=True, capture_output=True)


def _checkout(tmp_path: Path) -> Path:
    """origin: main at 100 J a run, feature at 120 J; returns a clone on feature."""
    origin = tmp_path / "origin"
    write_profile(origin, [100.0, 100.5, 99.5, 100.2, 99.8])
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", "base")
    _git(origin, "checkout", "-qb", "feature")
    write_profile(origin, [120.0, 120.9, 119.0, 120.5, 119.2])
    _git(origin, "commit", "-qam", "bigger model")
    _git(tmp_path, "clone", "-q", "-b", "feature", str(origin), "work")
    return tmp_path / "work"


def _agent_shim(directory: Path) -> None:
    """What `pip install greenops-agent` puts in the venv: a greenops-agent command."""
    directory.mkdir(parents=True)
    shim = directory / "greenops-agent"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m collectors \"$@\"\n")
    shim.chmod(0o755)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GREENOPS_", "GITHUB_",
                                                                    "CI_"))}
    env.update(PYTHONPATH=str(ROOT), BENCH_FAKES_ENERGY_FILE=str(tmp_path / "energy_mj"),
               **extra)
    return env


def test_github_action_gates_the_merge_base_and_fails_with_the_verdict(tmp_path):
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    steps = {s["name"]: s for s in action["runs"]["steps"]}
    gate_step = steps["Run the gate (interleaved with the merge base)"]
    work = _checkout(tmp_path)
    runner_temp = tmp_path / "runner"
    _agent_shim(runner_temp / "greenops-gate" / "bin")
    outputs, summary = tmp_path / "outputs", tmp_path / "summary"
    env = _env(tmp_path, RUNNER_TEMP=str(runner_temp), GITHUB_OUTPUT=str(outputs),
               GITHUB_STEP_SUMMARY=str(summary), WORKLOAD="ranker",
               BENCH_COMMAND=f"{sys.executable} -m tests.support.bench_fakes", COUNT_FROM="",
               BASE_REF="origin/main", BASELINE_BRANCH="", GREENOPS_SERVER="",
               EXTRA_ARGS=FAKE_ARGS.format(spool=tmp_path / "spool"))
    done = subprocess.run(["bash", "-e", "-c", gate_step["run"]], cwd=work, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # the step itself never fails: the last one does
    out = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert out["exit-code"] == "1"  # 20 % more energy per inference: a regression
    report = Path(out["report"]).read_text()
    assert "GreenOps efficiency gate: fail" in report and "interleaved" in report
    assert report in summary.read_text()
    last = steps["Fail the job with the gate's verdict"]
    done = subprocess.run(["bash", "-e", "-c", last["run"]], env={**env, "RC": "1"},
                          capture_output=True, text=True)
    assert done.returncode == 1 and "regression" in done.stdout
    # The comment step finds its own comment again by a marker on the first line.
    script = steps["Comment the report on the pull request"]["with"]["script"]
    assert "greenops-gate:${process.env.WORKLOAD}" in script and "updateComment" in script


class FakeGitLab:
    """The merge-request notes API: GET lists, POST adds, PUT replaces."""

    def __init__(self) -> None:
        notes = self.notes = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, doc):
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                assert self.headers["PRIVATE-TOKEN"] == "glpat-test"
                self._answer(notes)

            def do_POST(self):  # noqa: N802
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                notes.append({"id": len(notes) + 1, "body": doc["body"], "path": self.path})
                self._answer(notes[-1])

            def do_PUT(self):  # noqa: N802
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                note_id = int(self.path.rsplit("/", 1)[1])
                notes[note_id - 1]["body"] = doc["body"]
                self._answer(notes[note_id - 1])

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api/v4"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_gitlab_template_gates_posts_one_note_and_exits_with_the_verdict(tmp_path):
    job = yaml.safe_load(GITLAB.read_text())[".greenops-gate"]
    assert job["variables"]["GIT_DEPTH"] == 0
    work = _checkout(tmp_path)
    _agent_shim(work / ".greenops-gate" / "bin")
    (work / ".greenops-gate" / "bin" / "python").symlink_to(sys.executable)
    gitlab = FakeGitLab()
    env = _env(tmp_path, GREENOPS_WORKLOAD="ranker", GREENOPS_COUNT_FROM="",
               GREENOPS_BENCH_COMMAND=f"{sys.executable} -m tests.support.bench_fakes",
               GREENOPS_GATE_ARGS=FAKE_ARGS.format(spool=tmp_path / "spool"),
               CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main", CI_MERGE_REQUEST_IID="7",
               CI_PROJECT_ID="42", CI_API_V4_URL=gitlab.url, GREENOPS_GITLAB_TOKEN="glpat-test")
    try:
        for _ in range(2):  # a second push updates the note instead of adding one
            for line in job["script"][1:-1]:  # the install line is pip's business
                done = subprocess.run(["bash", "-e", "-c", line], cwd=work, env=env,
                                      capture_output=True, text=True)
                assert done.returncode == 0, done.stderr
    finally:
        gitlab.close()
    assert (work / "greenops-gate.rc").read_text().strip() == "1"
    assert len(gitlab.notes) == 1
    note = gitlab.notes[0]
    assert note["path"] == "/api/v4/projects/42/merge_requests/7/notes"
    assert note["body"].startswith("<!-- greenops-gate:ranker -->\n### ❌ GreenOps efficiency")
    done = subprocess.run(["bash", "-c", job["script"][-1]], cwd=work, env=env)
    assert done.returncode == 1
