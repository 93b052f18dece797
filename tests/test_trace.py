"""The trace file (RLX_TRACE_FILE): one buffered writer per file and process, appending
in place (never re-reading or replacing the file), safe from many threads and processes,
flushed at exit, never through a link, and never failing a run."""
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session
from rlx_core.runtime import trace
from rlx_core.runtime.trace import flush_traces

ROOT = Path(__file__).resolve().parents[1]


def _traced(name: str):
    g = Graph(name)
    x = g.input("x", (4,))
    g.set_outputs([g.neg(g.relu(x) + 1.0)])
    return Session("cpu").compile(g, CompileOptions(trace=True))


def _events(path: Path) -> list[dict]:
    flush_traces()
    return json.loads(path.read_text())


@pytest.fixture
def trace_file(tmp_path, monkeypatch):
    path = tmp_path / "trace.json"
    monkeypatch.setenv("RLX_TRACE_FILE", str(path))
    yield path
    flush_traces()


def test_four_graphs_from_four_threads(trace_file):
    """Once 193 of 400 runs raised FileNotFoundError (the rename raced); now every run's
    events land in the one file."""
    graphs = [_traced(f"g{i}") for i in range(4)]
    ops = len(_events_of_one_run(graphs[0], trace_file))
    errors = []

    def work(c):
        try:
            for _ in range(100):
                np.testing.assert_array_equal(c.run({"x": np.ones(4, np.float32)})[0], np.full(4, -2, np.float32))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c,)) for c in graphs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    events = _events(trace_file)
    assert len(events) == ops * 401
    assert sorted({e["tid"] for e in events}) == ["g0", "g1", "g2", "g3"]
    assert all(sum(e["tid"] == f"g{i}" for e in events) == ops * (100 + (i == 0)) for i in range(4))


def _events_of_one_run(compiled, path):
    compiled.run({"x": np.ones(4, np.float32)})
    return _events(path)


def test_events_are_appended_in_place(trace_file):
    """The file is extended over its closing bracket: same file (no replace), its old
    bytes untouched, whatever was in the array kept."""
    old = [{"name": f"old{i}", "ph": "X", "ts": i, "dur": 1, "pid": "p", "tid": "t"} for i in range(2000)]
    trace_file.write_text(json.dumps(old))
    before = trace_file.read_bytes()
    inode = trace_file.stat().st_ino
    c = _traced("append")
    for _ in range(3):
        c.run({"x": np.ones(4, np.float32)})
    events = _events(trace_file)
    assert trace_file.stat().st_ino == inode
    assert trace_file.read_bytes()[:len(before) - 1] == before[:-1]
    assert events[:2000] == old and len(events) > 2000 and all(e["ph"] == "X" for e in events[2000:])


def test_buffered_until_a_bound(trace_file, monkeypatch):
    monkeypatch.setattr(trace, "FLUSH_SECONDS", 3600.0)
    monkeypatch.setattr(trace, "FLUSH_EVENTS", 10)
    c = _traced("bounded")
    c.run({"x": np.ones(4, np.float32)})
    assert not trace_file.exists()  # a few events: kept in memory
    for _ in range(10):
        c.run({"x": np.ones(4, np.float32)})
    assert trace_file.exists()  # the size bound wrote them


def test_flushed_at_exit_and_shared_by_processes(tmp_path):
    """Two processes tracing into one file at once, exiting without an explicit flush."""
    path = tmp_path / "trace.json"
    script = ("import os, numpy as np\nfrom rlx_core import CompileOptions, Graph, Session\n"
              "g = Graph(os.environ['GRAPH']); x = g.input('x', (4,)); g.set_outputs([x + 1.0])\n"
              "c = Session('cpu').compile(g, CompileOptions(trace=True))\n"
              "for _ in range(50): c.run({'x': np.ones(4, np.float32)})\n")
    procs = [subprocess.Popen([sys.executable, "-c", script],
                              env={**os.environ, "RLX_TRACE_FILE": str(path), "PYTHONPATH": str(ROOT), "GRAPH": name})
             for name in ("a", "b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    events = json.loads(path.read_text())
    per_process = [sum(e["tid"] == name for e in events) for name in ("a", "b")]
    assert per_process[0] == per_process[1] >= 50 and sum(per_process) == len(events)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and modes")
def test_trace_file_is_private_and_never_a_link(tmp_path, trace_file, caplog):
    c = _traced("private")
    c.run({"x": np.ones(4, np.float32)})
    _events(trace_file)
    assert trace_file.stat().st_mode & 0o777 == 0o600
    other = tmp_path / "t2.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    other.symlink_to(victim)
    linked = trace.Tracer("linked", "cpu", path=str(other))
    with caplog.at_level(logging.WARNING, logger="rlx.trace"):
        with linked.span("op"):
            pass
        linked.end_run()
        flush_traces()
    assert victim.read_text() == "keep me" and "symbolic link" in caplog.text


def test_tracing_never_fails_a_run(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RLX_TRACE_FILE", str(tmp_path / "missing-dir" / "trace.json"))
    c = _traced("unwritable")
    with caplog.at_level(logging.WARNING, logger="rlx.trace"):
        for _ in range(3):
            c.run({"x": np.ones(4, np.float32)})
            flush_traces()
    assert caplog.text.count("cannot write the trace file") == 1
    not_json = tmp_path / "notes.txt"
    not_json.write_text("my notes")
    monkeypatch.setenv("RLX_TRACE_FILE", str(not_json))
    _traced("not-an-array").run({"x": np.ones(4, np.float32)})
    flush_traces()
    assert not_json.read_text() == "my notes"
