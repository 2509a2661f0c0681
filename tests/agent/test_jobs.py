"""`greenops-agent job start/stop` against a local HTTP server."""

from __future__ import annotations

import json

from collectors import cli

try:
    from tests.support.agent_fakes import FakeServer
except ImportError:  # tests/ itself on sys.path
    from agent_fakes import FakeServer


def job(tmp_path, server, *args):
    config = tmp_path / "agent.toml"
    config.write_text("")  # hermetic: never the host's /etc/greenops/agent.toml
    return cli.main(["job", *args[:1], "--server", server.url, "--token", "gho_t",
                     "--config", str(config), *args[1:]])


def test_start_prints_the_id_and_stop_stops_it(tmp_path, capsys):
    server = FakeServer(script=[
        (201, {}, {"id": 42, "name": "run 42", "status": "running"}),
        (200, {}, {"id": 42, "status": "done", "energy_kwh": 1.5}),
    ]).start()
    try:
        assert job(tmp_path, server, "start", "--workload", "llm-finetune", "--name", "run 42",
                   "--host", "gpu-node-1", "--gpus", "0,1", "--external-id", "ci-981") == 0
        assert capsys.readouterr().out == "42\n"
        assert job(tmp_path, server, "stop", "42") == 0
    finally:
        server.stop()
    start, stop = server.requests
    assert start.path == "/api/v1/training-jobs"
    assert start.headers["Authorization"] == "Bearer gho_t"
    assert start.doc == {"workload": "llm-finetune", "name": "run 42", "host": "gpu-node-1",
                         "gpus": [0, 1], "external_id": "ci-981"}
    assert stop.path == "/api/v1/training-jobs/42/stop"


def test_refusal_is_one_line_naming_the_field(tmp_path, capsys):
    refusal = {"error": "invalid", "field": "workload",
               "message": "must be the slug of a workload of this team"}
    server = FakeServer(script=[(422, {}, refusal)]).start()
    try:
        rc = job(tmp_path, server, "start", "--workload", "nope", "--name", "x")
    finally:
        server.stop()
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err == ("greenops-agent: server refused job start (workload): must be the slug of a "
                   "workload of this team")
    assert "\n" not in err


def test_gpus_need_a_host_and_nothing_is_sent(tmp_path, capsys):
    server = FakeServer().start()
    try:
        rc = job(tmp_path, server, "start", "--workload", "w", "--name", "x", "--gpus", "0")
    finally:
        server.stop()
    assert rc == 2 and server.requests == []
    assert "--gpus needs --host" in capsys.readouterr().err


def test_json_prints_the_whole_answer(tmp_path, capsys):
    answer = {"id": 7, "status": "done", "energy_kwh": 0.25}
    server = FakeServer(script=[(200, {}, answer)]).start()
    try:
        assert job(tmp_path, server, "stop", "7", "--json") == 0
    finally:
        server.stop()
    assert json.loads(capsys.readouterr().out) == answer
