"""The timeline: the file rank 0 writes on 2 ranks (valid JSON, every tensor, phases and
activities, per-rank readiness, errors, start/stop), and the summary tool, on that file and
on hand-made events with known answers."""
import json
import os
import subprocess
import sys

import pytest

from mxhorovod_devtools.mpirun import run_ranks
from mxhorovod.timeline.events import load, parse
from mxhorovod.timeline.summary import format_summary, summarize

from support.paths import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rows_of(events):
    """{tensor name: [events of its row]} and the metadata checks every file must pass."""
    # pid 0 holds the CYCLE_START markers; tensors are rows 1, 2, ...
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("name") == "process_name" and e["pid"] > 0}
    rows = {name: [] for name in names.values()}
    for e in events:
        if e["ph"] != "M" and e.get("pid") in names:
            rows[names[e["pid"]]].append(e)
    return rows


def check_nesting(name, row):
    """B/E balanced and properly nested, time never going back; returns the closed spans
    as (phase, start, end, parent phase)."""
    stack, spans, last = [], [], 0
    for e in row:
        assert e["ts"] >= last, (name, e)
        last = e["ts"]
        if e["ph"] == "B":
            stack.append((e["name"], e["ts"]))
        elif e["ph"] == "E":
            assert stack, "unmatched E in %s" % name
            phase, start = stack.pop()
            spans.append((phase, start, e["ts"], stack[-1][0] if stack else None))
    assert not stack, "spans left open in %s: %s" % (name, stack)
    return spans


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("timeline")
    env_path, dyn_path = str(d / "env.json"), str(d / "dyn.json")
    run_ranks(2, "timeline_ops.py", [env_path, dyn_path], timeout=240,
              env={"HOROVOD_TIMELINE": env_path, "HOROVOD_TIMELINE_MARK_CYCLES": "0"})
    return env_path, dyn_path


def test_env_timeline_has_every_tensor_and_phase(recorded):
    env_path, _ = recorded
    with open(env_path) as f:
        events = json.load(f)  # valid JSON: the closing bracket was written at shutdown
    rows = rows_of(events)
    # An allgather's or alltoall's size exchange is in its row: two operations per call.
    assert set(rows) == {"grad.0", "grad.1", "bcast", "gather", "a2a", "late", "mismatch"}, \
        sorted(rows)
    assert not any(e.get("name") == "CYCLE_START" for e in events)  # mark_cycles off
    expected_mpi = {"grad.0": "MPI_ALLREDUCE", "grad.1": "MPI_ALLREDUCE", "bcast": "MPI_BCAST",
                    "gather": "MPI_ALLGATHER", "a2a": "MPI_ALLTOALL", "late": "MPI_ALLREDUCE"}
    op_of = {"MPI_ALLREDUCE": "ALLREDUCE", "MPI_BCAST": "BROADCAST",
             "MPI_ALLGATHER": "ALLGATHER", "MPI_ALLTOALL": "ALLTOALL"}
    for name, mpi in expected_mpi.items():
        spans = check_nesting(name, rows[name])
        op = op_of[mpi]
        top = [s[0] for s in spans if s[3] is None]
        # Three steps: negotiation then operation, each time (twice for a sized call).
        calls = 6 if name in ("gather", "a2a") else 3
        assert top == ["NEGOTIATE_" + op, op] * calls, (name, top)
        inner = [s[0] for s in spans if s[3] == op]
        want = ["QUEUE", mpi]
        if name.startswith("grad."):  # a fused group of two tensors
            want = ["QUEUE", "MEMCPY_IN_FUSION_BUFFER", mpi, "MEMCPY_OUT_FUSION_BUFFER"]
        assert inner == want * calls, (name, inner)
        begins = [e for e in rows[name] if e["ph"] == "B" and e["name"] == op]
        assert all(e["args"]["dtype"] for e in begins), begins
        # The first negotiation went through the coordinator (both ranks' readiness),
        # the later ones through the response cache (which keeps a sized call's exchange
        # and data apart: both are cached).
        negs = [e for e in rows[name] if e["ph"] == "B" and e["name"].startswith("NEGOTIATE_")]
        first = calls // 3
        assert all("args" not in e for e in negs[:first]), (name, negs)
        assert all(e["args"]["via"] == "response cache" for e in negs[first:]), (name, negs)
    # 'late': rank 1 submitted it 0.6 s after rank 0 in the first step.
    ready = [e for e in rows["late"] if e["ph"] == "i"]
    first = {e["args"]["rank"]: e["ts"] for e in ready[:2]}
    assert set(first) == {0, 1} and ready[0]["name"] == "0" and ready[1]["name"] == "1"
    assert first[1] - first[0] > 400000, first  # microseconds
    # The negotiated error is an ERROR event naming the mismatch.
    errors = [e for e in rows["mismatch"] if e.get("name") == "ERROR"]
    assert len(errors) == 1 and "Mismatched shapes" in errors[0]["args"]["error"], errors
    check_nesting("mismatch", rows["mismatch"])


def test_start_stop_timeline_records_only_between(recorded):
    _, dyn_path = recorded
    with open(dyn_path) as f:
        events = json.load(f)
    rows = rows_of(events)
    assert set(rows) == {"dyn.x"}, sorted(rows)  # not 'after.stop', nor anything before
    spans = check_nesting("dyn.x", rows["dyn.x"])
    assert [s[0] for s in spans if s[3] is None] == ["NEGOTIATE_ALLREDUCE", "ALLREDUCE"]
    assert any(e.get("name") == "CYCLE_START" and e["s"] == "g" for e in events)  # mark_cycles


def test_summary_cli_on_recorded_file(recorded, tmp_path):
    env_path, _ = recorded
    png = tmp_path / "chart.png"
    out = subprocess.run([sys.executable, "-m", "mxhorovod.timeline", "summary", env_path,
                          "--top", "3", "--png", str(png)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # 3 steps: an allgather's or alltoall's exchange and data are one use of its row.
    assert "7 tensors, 3 steps" in text, text
    # 'late' waited 0.6 s for rank 1: the tensor that took longest, and rank 1 named.
    top = text.split("tensors that took the most time")[1].splitlines()[2]
    assert top.split()[0] == "late", text
    assert "rank 1: last in" in text and "... 4 more tensors" in text, text
    assert "NEGOTIATE_ALLREDUCE" in text and "MPI_ALLGATHER" in text and "Mismatched shapes" in text
    with open(png, "rb") as f:
        assert f.read(8) == PNG_MAGIC


def test_summary_of_an_unfinished_file(recorded, tmp_path):
    # A writer that died leaves no closing bracket and maybe half an event.
    env_path, _ = recorded
    with open(env_path) as f:
        text = f.read()
    cut = tmp_path / "cut.json"
    cut.write_text(text[:len(text) // 2])
    t = load(str(cut))
    assert t.tensors and t.spans
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = subprocess.run([sys.executable, "-m", "mxhorovod.timeline", "summary", str(bad)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 2 and "is not a timeline" in out.stderr, out.stderr
    # JSON, but not trace events (was an AttributeError traceback for the numbers).
    for text in ('[1, 2, "x", null]', '{"traceEvents": 5}'):
        bad.write_text(text)
        out = subprocess.run([sys.executable, "-m", "mxhorovod.timeline", "summary", str(bad)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=ROOT))
        assert out.returncode == 2 and "is not a timeline" in out.stderr, (text, out.stderr)


def test_summary_cli_into_a_closed_pipe(tmp_path):
    # "python -m mxhorovod.timeline summary FILE | head" ended in a BrokenPipeError traceback
    # once head had gone, before the chart was written.
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_row(1, "a") + _span(1, "NEGOTIATE_ALLREDUCE", 0, 10)
                               + _span(1, "ALLREDUCE", 10, 30)))
    png = tmp_path / "t.png"
    r, w = os.pipe()
    os.close(r)  # no reader at all: the first write fails with EPIPE
    try:
        out = subprocess.run([sys.executable, "-m", "mxhorovod.timeline", "summary", str(path)],
                             stdout=w, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=ROOT))
    finally:
        os.close(w)
    assert out.returncode == 0 and "Error" not in out.stderr, out.stderr
    with open(png, "rb") as f:
        assert f.read(8) == PNG_MAGIC


def _row(pid, name):
    return [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}]


def _span(pid, name, start, end):
    return [{"name": name, "ph": "B", "ts": start, "pid": pid}, {"ph": "E", "ts": end, "pid": pid}]


def test_summary_numbers_on_known_events():
    # Tensor a, step 0: negotiation 0-10 (rank 0 ready at 0, rank 1 at 8), allreduce 10-30
    # holding QUEUE 10-12 and MPI 12-28. Tensor b, step 0: negotiation 5-10 (both ready at
    # 5), allreduce 10-30 with QUEUE 10-20 and MPI 20-28. Tensor a, step 1: cached
    # negotiation 100-104, allreduce 104-110 with MPI 105-109.
    ev = _row(1, "a") + _row(2, "b")
    ev += [{"name": "NEGOTIATE_ALLREDUCE", "ph": "B", "ts": 0, "pid": 1},
           {"name": "0", "ph": "i", "ts": 0, "pid": 1, "args": {"rank": 0}},
           {"name": "NEGOTIATE_ALLREDUCE", "ph": "B", "ts": 5, "pid": 2},
           {"name": "0", "ph": "i", "ts": 5, "pid": 2, "args": {"rank": 0}},
           {"name": "1", "ph": "i", "ts": 5, "pid": 2, "args": {"rank": 1}},
           {"name": "1", "ph": "i", "ts": 8, "pid": 1, "args": {"rank": 1}},
           {"ph": "E", "ts": 10, "pid": 1}, {"ph": "E", "ts": 10, "pid": 2},
           {"name": "ALLREDUCE", "ph": "B", "ts": 10, "pid": 1},
           {"name": "ALLREDUCE", "ph": "B", "ts": 10, "pid": 2}]
    ev += _span(1, "QUEUE", 10, 12) + _span(2, "QUEUE", 10, 20)
    ev += _span(1, "MPI_ALLREDUCE", 12, 28) + _span(2, "MPI_ALLREDUCE", 20, 28)
    ev += [{"ph": "E", "ts": 30, "pid": 1}, {"ph": "E", "ts": 30, "pid": 2}]
    ev += [{"name": "NEGOTIATE_ALLREDUCE", "ph": "B", "ts": 100, "pid": 1, "args": {"via": "response cache"}},
           {"name": "0", "ph": "i", "ts": 100, "pid": 1, "args": {"rank": 0}},
           {"ph": "E", "ts": 104, "pid": 1}, {"name": "ALLREDUCE", "ph": "B", "ts": 104, "pid": 1}]
    ev += _span(1, "MPI_ALLREDUCE", 105, 109) + [{"ph": "E", "ts": 110, "pid": 1}]
    s = summarize(parse(ev))
    assert (s.tensors, s.steps, s.negotiations) == (2, 2, 2)
    phases = {p.phase: (p.sum_us, p.wall_us, p.count) for p in s.phases}
    assert phases["NEGOTIATE_ALLREDUCE"] == (10 + 5 + 4, 10 + 4, 3)
    assert phases["QUEUE"] == (2 + 10, 10, 2)
    assert phases["MPI_ALLREDUCE"] == (16 + 8 + 4, 16 + 4, 3)
    assert "ALLREDUCE" not in phases  # the operation span is a total, not a phase
    a, b = s.top
    assert (a.tensor, a.uses, a.total_us) == ("a", 2, 30 + 10)
    assert (b.tensor, b.uses, b.total_us) == ("b", 1, 25)
    assert a.by_group == {"NEGOTIATE": 14, "QUEUE": 2, "MPI": 20}
    assert s.per_step == [{"NEGOTIATE": 10, "QUEUE": 10, "MPI": 16}, {"NEGOTIATE": 4, "MPI": 4}]
    # Only a's first negotiation waited for a rank (rank 1, 8 us after rank 0); b's ranks
    # were ready together, a's second was cached.
    assert [(r.rank, r.last, r.mean_lag_us) for r in s.lateness] == [(1, 1, 8.0)]
    text = format_summary(s, top=1)
    assert "2 tensors, 2 steps" in text and "... 1 more tensors" in text
    assert "rank 1: last in 1 (on average 0.008 ms after the first rank)" in text


def test_summary_tolerates_a_recording_started_mid_operation():
    # The file begins inside an operation: an E without B is ignored, and an operation
    # without a recorded negotiation is a use of its own.
    ev = _row(1, "x") + [{"ph": "E", "ts": 1, "pid": 1}]
    ev += _span(1, "ALLREDUCE", 2, 5) + _span(1, "NEGOTIATE_ALLREDUCE", 6, 8) + _span(1, "ALLREDUCE", 8, 9)
    t = parse(ev)
    assert [(sp.phase, sp.use) for sp in t.spans] == [
        ("ALLREDUCE", 0), ("NEGOTIATE_ALLREDUCE", 1), ("ALLREDUCE", 1)]


def test_a_job_aborted_at_once_keeps_the_operations_before_it(tmp_path):
    # Rank 1 fails after five allreduces, as soon as the file shows them (at most 60 s:
    # the writer writes as events arrive, within 5 ms, as Horovod writes each event at
    # once; a writer that kept them until the end would never show them, and the check
    # below fails): MPI_Abort, and mpirun ends rank 0 by SIGTERM and SIGKILL at once. The
    # file was empty (0 bytes), then held only the open array; the abort must lose nothing
    # already written.
    path = tmp_path / "timeline.json"
    script = tmp_path / "abort_early.py"
    script.write_text(
        "import time\nimport mxnet as mx\nimport mxhorovod as hvd\n"
        "from mxhorovod.timeline.events import load\nhvd.init()\n"
        "for i in range(5):\n    hvd.allreduce(mx.nd.ones(2), name='a%%d' %% i).asnumpy()\n"
        "if hvd.rank() == 1:\n"
        "    want, deadline = {'a%%d' %% i for i in range(5)}, time.monotonic() + 60\n"
        "    while time.monotonic() < deadline:\n"
        "        try:\n"
        "            if want <= {s.tensor for s in load(%r).spans if s.phase == 'ALLREDUCE'}:\n"
        "                break\n"
        "        except Exception:  # not yet a file the summary tool reads\n"
        "            pass\n"
        "        time.sleep(0.05)\n"
        "    raise RuntimeError('rank 1 fails')\n"
        "time.sleep(90)\n" % str(path))
    proc = run_ranks(2, str(script), timeout=120, expect_ok=False,
                     env={"HOROVOD_TIMELINE": str(path), "HOROVOD_TIMELINE_MARK_CYCLES": "1"})
    assert proc.returncode != 0 and "rank 1 fails" in proc.stdout, proc.stdout[-3000:]
    text = path.read_text()
    assert text.startswith("[") and "process_name" in text, repr(text[:200])
    recorded = load(str(path))  # the summary tool reads the unfinished file
    done = {s.tensor for s in recorded.spans if s.phase == "ALLREDUCE"}
    assert done == {"a%d" % i for i in range(5)}, (done, text[-2000:])


def test_sized_call_is_one_use_unless_its_exchange_failed():
    # Row g: allgather call 0 (exchange 0-10, data 10-20), call 1 (exchange 30-40 that
    # failed: no data follows), call 2 (exchange 50-60, data 60-70). Row r: two allreduces.
    ev = _row(1, "g") + _row(2, "r")
    for start in (0, 10, 30, 50, 60):
        if start == 30:
            ev += _span(1, "NEGOTIATE_ALLGATHER", 30, 35)
            ev += [{"name": "ERROR", "ph": "i", "ts": 35, "pid": 1, "args": {"error": "Mismatched"}}]
            continue
        ev += _span(1, "NEGOTIATE_ALLGATHER", start, start + 5) + _span(1, "ALLGATHER", start + 5, start + 10)
    for start in (0, 10):
        ev += _span(2, "NEGOTIATE_ALLREDUCE", start, start + 5) + _span(2, "ALLREDUCE", start + 5, start + 10)
    t = parse(ev)
    uses = sorted({(s.tensor, s.use) for s in t.spans})
    assert uses == [("g", 0), ("g", 1), ("g", 2), ("r", 0), ("r", 1)], uses
    assert [(s.start_us, s.use) for s in t.spans if s.tensor == "g" and s.phase == "ALLGATHER"] == \
        [(5, 0), (15, 0), (55, 2), (65, 2)]
    assert t.errors == [("g", 1, "Mismatched")]


def test_summary_cli_without_matplotlib_names_the_extra(recorded, tmp_path):
    # matplotlib is the [timeline] extra, not a dependency: without it the summary is still
    # printed, and the chart's absence is explained.
    env_path, _ = recorded
    code = ("import sys, runpy; sys.modules['matplotlib'] = None; "
            "sys.argv = ['mxhorovod.timeline', 'summary', %r, '--png', %r]; "
            "runpy.run_module('mxhorovod.timeline', run_name='__main__')"
            % (env_path, str(tmp_path / "chart.png")))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 1, out.stderr
    assert "7 tensors, 3 steps" in out.stdout, out.stdout
    assert "pip install 'mxhorovod[timeline]'" in out.stderr, out.stderr
    assert not (tmp_path / "chart.png").exists()
