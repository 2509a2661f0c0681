"""The on-disk spool: restart safety, ack, dead letter, bound."""

import uuid

import pytest

from collectors import batch as wire
from collectors.spool import Spool
from tests.support import ROOT


def _put(spool: Spool, n: int, size: int = 10) -> list[str]:
    ids = []
    for i in range(n):
        batch_id = str(uuid.uuid4())
        spool.put(batch_id, bytes([i % 256]) * size, samples=i + 1)
        ids.append(batch_id)
    return ids


def test_survives_restart_with_the_same_ids_and_payloads(tmp_path):
    path = tmp_path / "state" / "spool.db"
    spool = Spool(path)
    doc = wire.build_batch({"ts": [1.0], "gpu_index": [0]}, "nvml")
    spool.put(doc["batch_id"], wire.encode(doc), 1)
    ids = [doc["batch_id"], *_put(spool, 2)]
    spool.close()

    reopened = Spool(path)
    assert reopened.batch_ids() == ids
    assert reopened.depth() == 3
    assert wire.decode(reopened.head().payload)["batch_id"] == ids[0]
    assert reopened.payloads()[1:] == [b"\x00" * 10, b"\x01" * 10]
    reopened.close()


def test_ack_removes_and_records_the_time(tmp_path):
    spool = Spool(tmp_path / "s.db")
    ids = _put(spool, 3)
    assert spool.last_ack_at() is None
    assert spool.ack(ids[0], now=1234.5)
    assert not spool.ack(ids[0])  # already gone
    assert spool.batch_ids() == ids[1:]
    assert spool.head().batch_id == ids[1]
    assert spool.last_ack_at() == 1234.5
    st = spool.status()
    assert (st.depth, st.samples, st.bytes) == (2, 2 + 3, 20)


def test_defer_counts_attempts(tmp_path):
    spool = Spool(tmp_path / "s.db")
    (batch_id,) = _put(spool, 1)
    spool.defer(batch_id, 99.0, "HTTP 503")
    spool.defer(batch_id, 100.0, "HTTP 503")
    head = spool.head()
    assert (head.attempts, head.next_attempt_at) == (2, 100.0)


def test_reject_moves_to_dead_letter(tmp_path):
    spool = Spool(tmp_path / "s.db")
    ids = _put(spool, 2)
    spool.reject(ids[0], 422, '{"error": "invalid", "field": "samples.power_w[3]"}')
    assert spool.batch_ids() == [ids[1]]
    (row,) = spool.rejected()
    assert row["batch_id"] == ids[0]
    assert row["http_status"] == 422
    assert "samples.power_w[3]" in row["error_body"]
    spool.close()
    assert Spool(tmp_path / "s.db").status().rejected == 1


def test_bound_on_batch_count_drops_the_oldest(tmp_path, caplog):
    spool = Spool(tmp_path / "s.db", max_batches=3)
    ids = _put(spool, 5)
    assert spool.batch_ids() == ids[2:]
    assert spool.status().dropped_batches == 2
    assert "dropped the 1 oldest" in caplog.text


def test_bound_on_bytes_drops_the_oldest(tmp_path):
    spool = Spool(tmp_path / "s.db", max_bytes=250)
    ids = _put(spool, 4, size=100)
    assert spool.batch_ids() == ids[2:]
    st = spool.status()
    assert (st.bytes, st.dropped_batches) == (200, 2)
    spool.close()
    # The running byte count is rebuilt on open.
    again = Spool(tmp_path / "s.db", max_bytes=250)
    more = _put(again, 1, size=100)
    assert again.batch_ids() == [ids[3], more[0]]


def test_oldest_age(tmp_path):
    spool = Spool(tmp_path / "s.db")
    assert spool.oldest_age() is None
    spool.put("a", b"x", 1, created_at=1000.0)
    spool.put("b", b"x", 1, created_at=1010.0)
    assert spool.oldest_age(now=1030.0) == pytest.approx(30.0)


def test_status_command(tmp_path):
    import subprocess
    import sys

    spool = Spool(tmp_path / "s.db")
    _put(spool, 2)
    spool.close()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "collectors.cli",
            "status",
            "--spool",
            str(tmp_path / "s.db"),
            "--config",
            str(_empty_toml(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "batches waiting: 2 (3 samples, 20 bytes)" in proc.stdout


def _empty_toml(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text("")
    return path
