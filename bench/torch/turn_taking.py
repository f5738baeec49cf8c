"""Process groups that are started once and then take turns: a driver hands
commands to one group at a time while the others wait idle, so that work timed
in one group is not disturbed by the others, and no group pays its start-up
again. multi_gpu_train.py's torchrun launches are such groups.

The protocol is files in a group's folder. The driver writes cmd-<k>.json
(k = 0, 1, ...), a JSON object with an "op"; every rank of the group polls for
it, hands it to its handler and writes the answer to done-<k>-rank<r>.json;
{"op": "exit"} ends the ranks' loop and is not answered. A rank writes
ready-rank<r>.json when it is set up. Waiting ranks only poll the file
system: no collective, whose waiting kernel would spin on a GPU that another
group is timing. Every write goes through a rename, so a reader never sees
half a file.

    # rank (handler: .handle(cmd) -> dict answer, .close() at exit)
    serve(folder, rank, handler, driver_pid)
    # driver
    g = Group(name, folder, ranks, command, env); g.start(); g.wait_ready(60)
    answers = g.send({"op": "steps", "count": 30}, timeout=60)   # one per rank
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.002       # how often a waiting side looks for the other's file
IDLE_POLL_S = 0.02   # how often a rank looks once it has waited IDLE_AFTER_S: many idle ranks, little host noise
IDLE_AFTER_S = 0.2


def write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def read_json(path: str):
    with open(path) as f:
        return json.load(f)


def ready_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"ready-rank{rank}.json")


def command_path(folder: str, k: int) -> str:
    return os.path.join(folder, f"cmd-{k}.json")


def done_path(folder: str, k: int, rank: int) -> str:
    return os.path.join(folder, f"done-{k}-rank{rank}.json")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- a rank's side ------------------------------------------------------------
def serve(folder: str, rank: int, handler, driver_pid: int) -> None:
    """The driver's commands, in order, until "exit". Ends the process when
    the driver is gone (nothing would ever come): a driver killed by a
    timeout leaves no rank holding a GPU."""
    write_json(ready_path(folder, rank), {"rank": rank, "pid": os.getpid()})
    k = 0
    last_check = waiting_since = time.monotonic()
    while True:
        path = command_path(folder, k)
        if not os.path.exists(path):
            now = time.monotonic()
            if now - last_check > 1.0:
                last_check = now
                if not process_alive(driver_pid):
                    print(f"rank {rank}: the driver (pid {driver_pid}) is gone; exiting", file=sys.stderr)
                    os._exit(3)
            time.sleep(POLL_S if now - waiting_since < IDLE_AFTER_S else IDLE_POLL_S)
            continue
        cmd = read_json(path)
        if cmd["op"] == "exit":
            handler.close()
            return
        write_json(done_path(folder, k, rank), handler.handle(cmd))
        k += 1
        waiting_since = time.monotonic()


# ---- the driver's side ----------------------------------------------------------
class GroupFailed(Exception):
    pass


class Group:
    """One launch of `ranks` processes (`command`, in the environment `env`)
    that serve() the commands written to `folder`. Its output goes to
    folder/log.txt. `failure` says why it was stopped, or is None."""

    def __init__(self, name: str, folder: str, ranks: int, command: list, env: dict):
        self.name, self.folder, self.ranks = name, folder, ranks
        self.command, self.env = command, env
        self.proc = None
        self.log = None
        self.next_k = 0
        self.failure = None

    def start(self) -> None:
        os.makedirs(self.folder, exist_ok=True)
        for f in os.listdir(self.folder):  # a previous call's files would read as answers
            if f.endswith(".json") or f.endswith(".tmp"):
                os.remove(os.path.join(self.folder, f))
        self.log = open(os.path.join(self.folder, "log.txt"), "w")
        # The driver's own process group: a timeout's signal to the group reaches the launch too.
        self.proc = subprocess.Popen(self.command, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)

    def log_tail(self) -> str:
        """The log's last line that names an error, else its last line."""
        try:
            with open(os.path.join(self.folder, "log.txt")) as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            return "?"
        errors = [ln for ln in lines if "Error" in ln or "error" in ln]
        return ((errors or lines or ["?"])[-1])[-240:]

    def wait_for(self, paths: list, timeout: float, what: str) -> list:
        deadline = time.monotonic() + timeout
        while True:
            if all(os.path.exists(p) for p in paths):
                return [read_json(p) for p in paths]
            if self.proc is not None and self.proc.poll() is not None:
                raise GroupFailed(f"{what}: exited {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise GroupFailed(f"{what}: no answer within {timeout:.0f} s")
            time.sleep(POLL_S)

    def wait_ready(self, timeout: float) -> None:
        self.wait_for([ready_path(self.folder, r) for r in range(self.ranks)], timeout, "start")

    def send(self, cmd: dict, timeout: float) -> list:
        """Every rank's answer to `cmd`, in rank order ([] for "exit", which is not answered)."""
        k = self.next_k
        self.next_k += 1
        write_json(command_path(self.folder, k), cmd)
        if cmd["op"] == "exit":
            return []
        return self.wait_for([done_path(self.folder, k, r) for r in range(self.ranks)], timeout, cmd["op"])

    def fail(self, why: str) -> None:
        """Records why and stops the group: told to exit (ranks that still
        answer do), then signalled if it has not within a few seconds."""
        self.failure = why
        if self.proc is not None and self.proc.poll() is None:
            self.send({"op": "exit"}, 0)
        self.stop(grace_s=5)

    def stop(self, grace_s: float) -> None:
        """Waits `grace_s` for the launch to end, then SIGTERM (torchrun passes it to its ranks), then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        if self.log is not None:
            self.log.close()
            self.log = None
