"""bench/torch/turn_taking.py, the protocol by which multi_gpu_train.py's
process groups take turns: answers come back per rank and in order, a rank
that dies or stays silent fails the group with the reason, and ranks whose
driver is gone end themselves (no GPU held by an orphan)."""
import os
import subprocess
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "torch")
sys.path.insert(0, BENCH)
from turn_taking import Group, GroupFailed  # noqa: E402

# A rank: answers {"op": "echo"} with its rank and the command, dies on
# {"op": "die"}, never answers {"op": "hang"}.
RANK = """
import os, sys, time
sys.path.insert(0, {bench!r})
from turn_taking import serve
class Handler:
    def handle(self, cmd):
        if cmd["op"] == "die":
            print("RuntimeError: rank {{}} told to die".format(RANK), flush=True)
            os._exit(7)
        if cmd["op"] == "hang":
            time.sleep(60)
        return {{"rank": RANK, "cmd": cmd}}
    def close(self):
        print("rank {{}} closed".format(RANK), flush=True)
RANK = int(sys.argv[1])
serve(sys.argv[2], RANK, Handler(), int(sys.argv[3]))
"""


# The launch: `ranks` ranks; when one fails, or the launch is sent SIGTERM,
# the ranks are killed and the launch exits 1, as torchrun does; 0 when every
# rank ended well.
LAUNCHER = """
import signal, subprocess, sys, time
script, ranks, folder, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
procs = [subprocess.Popen([sys.executable, "-c", script, str(r), folder, pid]) for r in range(ranks)]
def stop(*_):
    for p in procs:
        p.kill()
    sys.exit(1)
signal.signal(signal.SIGTERM, stop)
while True:
    codes = [p.poll() for p in procs]
    if any(c not in (None, 0) for c in codes):
        stop()
    if all(c == 0 for c in codes):
        sys.exit(0)
    time.sleep(0.02)
"""


def launch(folder, ranks, driver_pid=None):
    command = [sys.executable, "-c", LAUNCHER, RANK.format(bench=BENCH), str(ranks), str(folder),
               str(driver_pid or os.getpid())]
    return Group("test", str(folder), ranks, command, dict(os.environ))


def test_answers_come_back_per_rank_in_order_and_exit_ends_the_launch(tmp_path):
    g = launch(tmp_path, 2)
    g.start()
    g.wait_ready(30)
    for i in range(3):
        answers = g.send({"op": "echo", "i": i}, 30)
        assert [a["rank"] for a in answers] == [0, 1]
        assert all(a["cmd"] == {"op": "echo", "i": i} for a in answers)
    assert g.send({"op": "exit"}, 0) == []
    g.stop(grace_s=30)
    assert g.proc.returncode == 0
    log = (tmp_path / "log.txt").read_text()
    assert "rank 0 closed" in log and "rank 1 closed" in log


def test_a_rank_that_dies_fails_the_group_with_its_error_line(tmp_path):
    g = launch(tmp_path, 2)
    g.start()
    g.wait_ready(30)
    with pytest.raises(GroupFailed, match="die: exited 1: RuntimeError: rank [01] told to die"):
        g.send({"op": "die"}, 30)
    g.fail("died")
    assert g.failure == "died" and g.proc.poll() is not None


def test_a_silent_group_fails_after_the_timeout_and_is_stopped(tmp_path):
    g = launch(tmp_path, 2)
    g.start()
    g.wait_ready(30)
    t = time.monotonic()
    with pytest.raises(GroupFailed, match="hang: no answer within 1 s"):
        g.send({"op": "hang"}, 1)
    assert time.monotonic() - t < 5
    g.fail("silent")  # told to exit, signalled after 5 s
    assert g.proc.poll() is not None


def test_answers_of_an_earlier_call_in_the_folder_are_not_read(tmp_path):
    (tmp_path / "done-0-rank0.json").write_text('{"stale": true}')
    (tmp_path / "done-0-rank1.json").write_text('{"stale": true}')
    g = launch(tmp_path, 2)
    g.start()
    g.wait_ready(30)
    assert [a["rank"] for a in g.send({"op": "echo"}, 30)] == [0, 1]
    g.send({"op": "exit"}, 0)
    g.stop(grace_s=30)


def test_ranks_end_themselves_when_the_driver_is_gone(tmp_path):
    driver = subprocess.Popen(["sleep", "1"])
    g = launch(tmp_path, 2, driver_pid=driver.pid)
    g.start()
    g.wait_ready(30)
    driver.wait()
    g.stop(grace_s=10)  # no signal needed: the ranks notice within about a second
    assert g.proc.returncode == 1
    assert "the driver (pid %d) is gone" % driver.pid in (tmp_path / "log.txt").read_text()
