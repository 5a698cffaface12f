"""mxhorovodrun/output.py: the ranks' output under hydra, relayed by the launcher: whole
lines, --output-filename, --prefix-output-with-timestamp, prompts and progress bars,
signals (Ctrl-C reaches mpirun once, a killed launcher ends the job) and exit status."""
import io
import os
import re
import signal
import subprocess
import sys

import pytest

from mxhorovod_devtools.mpirun import REPO, as_from_a_terminal, process_gone, worker_path
from mxhorovodrun.mpi import HYDRA, INTEL_MPI, OPEN_MPI
from mxhorovodrun.output import pad_rank
from support.launcher import launcher, plan, start_sleepers


def test_output_flags_command_lines(tmp_path):
    # hydra (and Intel MPI): each rank's output to the launcher's pipes, no -l (the
    # launcher tags the lines itself), with or without the output flags.
    for flags in (["--output-filename", "out"], ["--prefix-output-with-timestamp"], []):
        for flavour in (HYDRA, INTEL_MPI):
            cmd, _, _ = plan(tmp_path, flavour, ["-np", "2"] + flags + ["python", "t.py"])
            assert "-l" not in cmd
            i = cmd.index("-outfile-pattern")
            assert cmd[i:i + 4] == ["-outfile-pattern", "/cap/stdout.%r", "-errfile-pattern",
                                    "/cap/stderr.%r"], cmd
            assert cmd[-2:] == ["python", "t.py"]
    # Open MPI does both itself, as horovodrun has it do.
    cmd, _, _ = plan(tmp_path, OPEN_MPI, ["-np", "2", "--output-filename", "out",
                                          "--prefix-output-with-timestamp", "python", "t.py"])
    i = cmd.index("--output-filename")
    assert cmd[i + 1] == "out" and "--timestamp-output" in cmd and "-outfile-pattern" not in cmd


def test_pad_rank():
    assert [pad_rank(r, 2) for r in (0, 1)] == ["0", "1"]
    assert [pad_rank(r, 11) for r in (0, 3, 10)] == ["00", "03", "10"]
    assert pad_rank(7, 100) == "07" and pad_rank(7, 101) == "007" and pad_rank(0, 1) == "0"


def _asctime_prefix():
    return r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4} "


def test_end_to_end_unbuffered_lines_stay_whole():
    # Under PYTHONUNBUFFERED=1 a print is two writes (the text, then the newline). Hydra's
    # -l, the console's default before, tagged each write: "[0] line 0 xxx[0] " and the
    # ranks' lines run together. The relay prints each line whole, in each rank's order.
    script = ('import os; r = int(os.environ["PMI_RANK"])\n'
              'for i in range(300):\n'
              '    print("rank %d line %d" % (r, i), "x" * 40)\n')
    proc = launcher(["-np", "2", sys.executable, "-c", script],
                    env={"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()
    seen = {0: [], 1: []}
    for line in lines:
        m = re.fullmatch(r"\[(\d)\] rank (\d) line (\d+) x{40}", line)
        assert m and m.group(1) == m.group(2), (line, proc.stdout[-3000:])
        seen[int(m.group(1))].append(int(m.group(3)))
    assert seen == {0: list(range(300)), 1: list(range(300))}


def test_end_to_end_output_filename(tmp_path):
    out = tmp_path / "logs"
    tmp = tmp_path / "tmp"  # the launcher's own: other jobs' launchers use /tmp meanwhile
    tmp.mkdir()
    proc = launcher(["-np", "2", "--output-filename", str(out), sys.executable,
                     worker_path("output_lines.py")], env={"TMPDIR": str(tmp)},
                    timeout=180)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert sorted(os.listdir(out)) == ["rank.0", "rank.1"]
    for r in range(2):
        d = out / ("rank.%d" % r)
        assert sorted(os.listdir(d)) == ["stderr", "stdout"]
        stdout = (d / "stdout").read_text().splitlines()
        assert stdout[:2] == ["out first of rank %d" % r, "out split line of rank %d" % r], stdout
        assert stdout[2].startswith("AFFINITY %d " % r) and stdout[3] == "RANK %d OK" % r, stdout
        assert len(stdout) == 4, stdout
        # Only this rank's, exactly as written (the unterminated last line too).
        assert (d / "stderr").read_text() == "err of rank %d\nerr unterminated of rank %d" % (r, r)
        # ... and on the console, tagged with the rank, one line at a time.
        for line in ("out first of rank %d" % r, "out split line of rank %d" % r, "RANK %d OK" % r,
                     "err of rank %d" % r, "err unterminated of rank %d" % r):
            assert re.search(r"^\[%d\] %s$" % (r, line), proc.stdout, re.M), (line, proc.stdout[-3000:])
    # The launcher's pipes are gone.
    assert os.listdir(tmp) == []


def test_end_to_end_timestamps_and_padded_ranks(tmp_path):
    out = tmp_path / "logs"
    script = ('import os, sys; r = os.environ["PMI_RANK"]; print("hello from", r); '
              'print("oops", r, file=sys.stderr)')
    proc = launcher(["-np", "11", "--output-filename", str(out), "--prefix-output-with-timestamp",
                     sys.executable, "-c", script], env={"OMP_NUM_THREADS": "1"}, timeout=180)
    assert proc.returncode == 0, proc.stdout[-6000:]
    stamp = _asctime_prefix()
    assert sorted(os.listdir(out)) == ["rank.%02d" % r for r in range(11)]
    for r in range(11):
        d = out / ("rank.%02d" % r)
        assert re.fullmatch(stamp + r"hello from %d\n" % r, (d / "stdout").read_text()), r
        assert re.fullmatch(stamp + r"oops %d\n" % r, (d / "stderr").read_text()), r
        assert re.search("^%s\\[%d\\] hello from %d$" % (stamp, r, r), proc.stdout, re.M), proc.stdout
    # Timestamps alone: on the console only, no files.
    proc = launcher(["-np", "2", "--prefix-output-with-timestamp", sys.executable, "-c", script],
                    timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for r in range(2):
        assert re.search("^%s\\[%d\\] oops %d$" % (stamp, r, r), proc.stdout, re.M), proc.stdout


def test_end_to_end_output_filename_with_the_console_gone(tmp_path):
    # "mxhorovodrun --output-filename DIR ... | head": once the console's reader had gone,
    # each relaying thread died of a BrokenPipeError (a traceback per rank and stream) and
    # closed its rank's pipe, so DIR/rank.<r>/stdout stopped at the lines already relayed.
    out = tmp_path / "logs"
    script = ('import os, sys, time; r = os.environ["PMI_RANK"]\n'
              'for i in range(30):\n'
              '    sys.stdout.write("line %d of rank %s\\n" % (i, r)); sys.stdout.flush()\n'
              '    time.sleep(0.01)\n')
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    r, w = os.pipe()
    os.close(r)  # no reader at all: the first console write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "mxhorovodrun", "-np", "2",
                               "--output-filename", str(out), sys.executable, "-c", script],
                              env=full, stdout=w, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for rank in range(2):
        lines = (out / ("rank.%d" % rank) / "stdout").read_text().splitlines()
        assert lines == ["line %d of rank %d" % (i, rank) for i in range(30)], lines


def test_end_to_end_captured_exit_status_and_killed_rank(tmp_path):
    # The launcher is mpirun's parent now: the rank's exit status still comes back, and a
    # killed rank still ends the job.
    proc = launcher(["-np", "2", "--prefix-output-with-timestamp", sys.executable, "-c",
                     "import sys; sys.exit(3)"], timeout=120)
    assert proc.returncode == 3, proc.stdout[-3000:]
    out = tmp_path / "logs"
    proc = launcher(["-np", "2", "--output-filename", str(out), sys.executable,
                     worker_path("multihost_kill.py"), "1"], timeout=120)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "RANK 1 KILLS ITSELF" in (out / "rank.1" / "stdout").read_text()
    assert "SURVIVED" not in proc.stdout


class _FakeMpirun:
    """Stands in for mpirun's Popen in run_captured: records how it was started; its wait()
    sends this process the signals of ``signals`` (the launcher's forwarding handler runs),
    then returns ``code``."""

    def __init__(self, signals, code):
        self.signals, self.code, self.kwargs, self.got = signals, code, None, []

    def __call__(self, argv, **kwargs):
        self.kwargs = kwargs
        return self

    def send_signal(self, signum):
        self.got.append(signum)

    def wait(self):
        for signum in self.signals:
            os.kill(os.getpid(), signum)
        return self.code

    def poll(self):
        return self.code


@pytest.mark.parametrize("signals, code, want", [
    ([], 0, 0),
    ([signal.SIGINT], 0, 0),          # the ranks caught the KeyboardInterrupt and ended well
    ([signal.SIGINT], 1, 1),
    ([signal.SIGINT, signal.SIGINT], 0, 130),  # hydra forced the abort, then said 0
    ([signal.SIGINT, signal.SIGINT], 255, 255),
])
def test_captured_run_own_session_and_interrupted_status(tmp_path, signals, code, want):
    # A Ctrl-C at the terminal signals the whole foreground process group: mpirun, in the
    # launcher's group, got SIGINT twice (the terminal's and the forwarded one), which hydra
    # takes as "force abort" and then exited 0 about one time in three.
    from mxhorovodrun.output import run_captured
    fake = _FakeMpirun(signals, code)
    capture = tmp_path / "pipes"
    capture.mkdir()
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert run_captured(["mpirun"], {}, 1, str(capture), popen=fake,
                            console=(io.BytesIO(), io.BytesIO())) == want
        assert fake.kwargs.get("start_new_session") is True, fake.kwargs
        assert fake.got == signals
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, before)


def test_captured_run_leaves_ignored_signals_ignored(tmp_path):
    # "nohup mxhorovodrun ... &": SIGHUP is ignored; forwarding it would end the job when
    # the terminal hangs up, which nohup is there to prevent (mpirun, in a session of its
    # own, would not have heard the terminal's hang-up at all).
    from mxhorovodrun.output import run_captured

    class Fake(_FakeMpirun):
        def wait(self):
            self.seen = signal.getsignal(signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGHUP)
            return self.code
    fake = Fake([], 0)
    capture = tmp_path / "pipes"
    capture.mkdir()
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert run_captured(["mpirun"], {}, 1, str(capture), popen=fake,
                            console=(io.BytesIO(), io.BytesIO())) == 0
        assert fake.seen == signal.SIG_IGN and fake.got == []
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_end_to_end_ctrl_c_of_the_terminal_reaches_mpirun_once(tmp_path):
    # A Ctrl-C in the terminal is a SIGINT to the whole foreground process group. mpirun,
    # in the launcher's group, got it from the terminal and once more from the launcher;
    # hydra takes a second SIGINT as "force abort": the ranks were killed in their
    # KeyboardInterrupt handling and mpirun exited 255 with assertion messages. Plain
    # mpirun lets them clean up and exits 0.
    proc, _ = start_sleepers(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for r in range(2):
        assert "[%d] rank %d cleaned up" % (r, r) in out, out[-3000:]
    assert "Ctrl-C caught" not in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]


def test_end_to_end_launcher_killed_ends_the_job(tmp_path):
    # SIGKILL (or the OOM killer) of the launcher: with mpirun exec'ed that was mpirun's
    # death and hydra ended the ranks; with mpirun as the launcher's orphan the job ran on
    # to its end, its output going nowhere. mpirun now gets SIGTERM when the launcher dies.
    # The pipes' directory (/tmp/mxhorovodrun-*) was left behind, one per killed job; it
    # is removed now (output.remove_when_gone).
    import shutil
    import time
    proc, pids = start_sleepers(tmp_path)
    with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
        pids += [int(p) for p in f.read().split()]  # mpirun
    assert len(pids) == 3
    with open("/proc/%d/cmdline" % pids[2], "rb") as f:
        argv = f.read().decode().split("\0")
    pipes = os.path.dirname(argv[argv.index("-outfile-pattern") + 1])
    assert os.path.isdir(pipes)
    proc.kill()
    proc.wait()  # not communicate(): mpirun holds the output pipe until it ends
    proc.stdout.close()
    deadline = time.monotonic() + 30
    while not (all(process_gone(p) for p in pids) and not os.path.exists(pipes)) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if not process_gone(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    pipes_left = os.path.exists(pipes)
    shutil.rmtree(pipes, ignore_errors=True)
    assert not left, "still running after the launcher was killed: %s" % left
    assert not pipes_left, "the launcher's pipes were left behind: %s" % pipes


def test_pipes_directory_removed_when_its_holders_are_gone(tmp_path):
    # The process of remove_when_gone waits, in a session of its own (the terminal's
    # Ctrl-C does not end it), for every holder of the descriptor to go.
    import time
    from mxhorovodrun.output import remove_when_gone
    pipes = tmp_path / "mxhorovodrun-x"
    pipes.mkdir()
    os.mkfifo(str(pipes / "stdout.0"))
    fd = remove_when_gone(str(pipes))
    assert fd is not None and not os.get_inheritable(fd)
    # A second holder (what the relay is, after the exec): its exit, not ours, ends it.
    os.set_inheritable(fd, True)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE, close_fds=False)
    os.close(fd)
    try:
        waiter = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p)[3:] ==
                  ["mxhorovodrun-cleanup", str(pipes)]]
        assert len(waiter) == 1, waiter
        assert os.getsid(int(waiter[0])) != os.getsid(0)
        time.sleep(0.5)  # a chance to go wrong; the directory must stay meanwhile
        assert pipes.is_dir()
    finally:
        holder.stdin.close()
        holder.wait(60)
    deadline = time.monotonic() + 30
    while pipes.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pipes.exists()
    while not process_gone(int(waiter[0])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process_gone(int(waiter[0]))


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def test_relay_shows_prompts_and_progress_bars_and_bounds_a_line():
    # The relay held a line until its newline: input()'s or pdb's prompt showed only after
    # the user had typed the answer blind, a tqdm bar ("\r" + bar, "\n" at its very end)
    # not at all until it was done (and grew in memory all along), a line without newline
    # without bound. Now: what a rank leaves unfinished for PARTIAL_AFTER is shown, "\r"
    # ends a line, and at most PARTIAL_MAX of a line is held.
    import io
    import threading
    import time
    from mxhorovodrun import output

    console = io.BytesIO()
    sink = output._sinks((console, console), timestamps=False)[0]
    fds = [os.pipe() for _ in range(2)]
    threads = [threading.Thread(target=output._read, args=(r, rank, sink, None, 0.05))
               for rank, (r, _) in enumerate(fds)]
    for t in threads:
        t.start()
    w0, w1 = fds[0][1], fds[1][1]

    def shown_soon(text):
        deadline = time.monotonic() + 10
        while text not in console.getvalue():
            assert time.monotonic() < deadline, (text, console.getvalue())
            time.sleep(0.01)

    os.write(w0, b"name? ")
    shown_soon(b"[0] name? ")  # the prompt, before its answer
    os.write(w0, b"got alice\n")  # after the terminal's echo: a line of its own
    os.write(w0, b"epoch 1 ...")
    shown_soon(b"[0] epoch 1 ...")
    os.write(w0, b" done\n")  # nothing came in between: the same line goes on
    shown_soon(b"[0] epoch 1 ... done\n")  # before rank 1 writes (its reader may be first)
    os.write(w1, b"\r 10%|#   |")
    os.write(w1, b"\r 20%|##  |")
    shown_soon(b"[1]  10%|#   |\r")  # each state of the bar: a line ended by "\r"
    os.write(w1, b"\r100%|####|\nwin\r\nlast\n")
    shown_soon(b"[1] last\n")
    os.write(w1, b"\r    \r")  # tqdm clearing its bar when it closes; a pause; a print
    shown_soon(b"[1]     \r")
    time.sleep(0.2)  # 4 x partial_after: the "\r" ended that line
    os.write(w1, b"epoch done\n")
    shown_soon(b"epoch done\n")
    os.close(w1)
    threads[1].join(10)
    big = b"y" * (3 * output.PARTIAL_MAX + 5)
    os.write(w0, b"L")
    shown_soon(b"[0] L")

    def feed():
        os.write(w0, big)
        os.close(w0)
    writer = threading.Thread(target=feed)
    writer.start()
    threads[0].join(20)
    writer.join(10)
    text = console.getvalue()
    assert text.startswith(b"[0] name? [0] got alice\n[0] epoch 1 ... done\n"), text[:300]
    assert b"[1]  10%|#   |\r[1]  20%|##  |\r[1] 100%|####|\n[1] win\r\n[1] last\n" in text, text[:300]
    assert b"[1]     \r[1] epoch done\n" in text, text[:400]
    # The big line: whole, in pieces of at most PARTIAL_MAX (one rank only: not re-tagged).
    assert text.endswith(b"[0] L" + big + b"\n"), text[-100:]


def test_end_to_end_prompt_shows_before_its_answer(tmp_path):
    # Rank 0 prompts (no newline) and waits for the answer, which the test gives only
    # once it sees the prompt on the launcher's console (the relay held it until the
    # newline, i.e. until after the answer: the user answered blind).
    import threading
    import time
    answer = tmp_path / "answer"
    script = ('import os, sys, time; r = os.environ["PMI_RANK"]\n'
              'if r == "0":\n'
              '    sys.stdout.write("name? "); sys.stdout.flush()\n'
              '    deadline = time.time() + 60\n'
              '    while not os.path.exists(sys.argv[1]) and time.time() < deadline:\n'
              '        time.sleep(0.05)\n'
              '    print("answered" if os.path.exists(sys.argv[1]) else "NO ANSWER")\n')
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.Popen([sys.executable, "-m", "mxhorovodrun", "-np", "2", sys.executable,
                             "-c", script, str(answer)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    seen = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: proc.stdout.read1(4096), b"")))
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while b"[0] name? " not in b"".join(seen) and proc.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        answer.write_text("alice")
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(10)
    out = b"".join(seen).decode()
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"^\[0\] name\? \[0\] answered$", out, re.M), out[-3000:]


def test_end_to_end_console_that_fails_is_named():
    # stdout on a full disk (/dev/full): the relay dropped the ranks' stdout without a
    # word and exited 0. The job still runs on (as with "| head"), and stderr says so.
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    with open("/dev/full", "wb") as devfull:
        proc = subprocess.run([sys.executable, "-m", "mxhorovodrun", "-np", "2", sys.executable,
                               "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
                              env=full, stdout=devfull, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("mxhorovodrun: cannot write the ranks' stdout to the console "
                             "(No space left on device)") == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stderr.count("] err") == 2, proc.stderr[-3000:]


def test_relay_loses_nothing_on_a_console_made_non_blocking():
    # mpirun shares the launcher's console (same open file) and hydra makes it
    # non-blocking: the relay's buffered writes then lost whole lines whenever the console's
    # reader was slower than the ranks (50 MB per rank into a slow pipe: hundreds of lines).
    import fcntl
    import threading
    import time
    from mxhorovodrun import output

    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    console = os.fdopen(w, "wb")
    got = []

    def slow_reader():
        while True:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            got.append(chunk)
            time.sleep(0.0005)
    reader = threading.Thread(target=slow_reader)
    reader.start()
    sink = output._sinks((console, console), timestamps=False)[0]
    lines = [b"%06d %s\n" % (i, b"x" * 90) for i in range(5000)]
    for line in lines:
        sink.write(0, line, None)
    console.close()
    reader.join(60)
    os.close(r)
    assert b"".join(got) == b"".join(b"[0] " + line for line in lines)
