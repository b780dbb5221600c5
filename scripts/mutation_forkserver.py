#!/usr/bin/env python3
"""A pre-warmed pytest for mutation runs: a server imports the heavy libraries once (numpy,
pytest, hypothesis, pydantic, SQLAlchemy), then forks one child per test run, which imports
rackscale afresh (so it sees the mutant on disk) and runs pytest. That cuts each mutant's cost
from ~2.5 s of CPU to well under one on this code base.

  serve SOCKET TIMEOUT      run the server (exits when its parent, the mutation driver, dies)
  run SOCKET -- ARGS...     run `pytest ARGS` in a fresh fork; exit with pytest's status

The server must never import rackscale itself: a module imported before the fork would be the
unmutated one in every child.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

# The rooms whose third-party imports are worth loading once (matplotlib alone costs seconds).
ROOMS = ("certify", "checkpoint", "lifecycle", "report", "store", "fleet", "recovery")
_LIST_IMPORTS = (
    "import importlib, sys\n"
    f"for room in {ROOMS!r}:\n"
    "    importlib.import_module('rackscale.' + room)\n"
    "import pytest, hypothesis\n"
    "print('\\n'.join(sorted(m for m in sys.modules if not m.startswith('rackscale'))))\n"
)


def _preload() -> None:
    """Import every third-party module rackscale's rooms import, found by importing them in a
    throw-away interpreter (importing rackscale here would pin the unmutated code)."""
    import importlib
    import subprocess

    names = subprocess.run([sys.executable, "-c", _LIST_IMPORTS], capture_output=True,
                           text=True, check=True).stdout.split()
    for name in names:
        if name == "__main__":
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a submodule that imports only in its package's context: the
            continue  # child imports it then, as it would without the server
    if any(m.startswith("rackscale") for m in sys.modules):
        raise RuntimeError("a preloaded library imported rackscale: mutants would not load")


def _child(args: list[str], cwd: str, out_fd: int) -> None:
    os.setsid()
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.chdir(cwd)
    sys.path.insert(0, os.path.join(cwd, "src"))
    import pytest

    code = pytest.main(args)
    sys.stdout.flush()
    os._exit(int(code))


def _handle(conn: socket.socket, timeout: float) -> None:
    req = json.loads(conn.makefile("r").readline())
    log_path = req["log"]
    with open(log_path, "wb") as log:
        pid = os.fork()
        if pid == 0:
            conn.close()
            _child(req["args"], req["cwd"], log.fileno())
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.killpg(pid, signal.SIGKILL)  # the child leads its own group (setsid)
        os.waitpid(pid, 0)
        conn.sendall(b"timeout\n")
        return
    code = os.waitstatus_to_exitcode(status)
    conn.sendall(f"{code}\n".encode())


def serve(sock_path: str, timeout: float) -> None:
    _preload()
    parent = os.getppid()
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(sock_path)
    srv.listen(4)
    srv.settimeout(1.0)
    while os.getppid() == parent:
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            continue
        with conn:
            _handle(conn, timeout)


def run(sock_path: str, args: list[str]) -> int:
    log = f"{sock_path}.{os.getpid()}.log"
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock_path)
        s.sendall((json.dumps({"args": args, "cwd": os.getcwd(), "log": log}) + "\n").encode())
        reply = s.makefile("r").readline().strip()
    try:
        with open(log, errors="replace") as f:
            sys.stdout.write(f.read())
    finally:
        os.unlink(log)
    if reply == "timeout":
        print("timed out")
        return 124
    return int(reply)


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"] and len(argv) == 3:
        serve(argv[1], float(argv[2]))
        return 0
    if argv[:1] == ["run"] and len(argv) >= 3 and argv[2] == "--":
        return run(argv[1], argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
