"""The client side of the job server (:mod:`lab.server`): ask it to fork a job for this process,
then wait for the job's status, as for a child process. Light on purpose: every measurement job's
supervisor (:mod:`lab.supervise`) imports it (``json``, ``os``, ``socket``, ``sys``; 5 ms, where
:mod:`lab.server` takes 16 ms more).
"""

from __future__ import annotations

import json
import os
import socket
import sys

#: The environment variable that names the server's socket for :func:`start` and
#: :func:`lab.server.launch` (set by the workflow, common.smk).
SOCKET_VARIABLE = "LAB_JOB_SERVER"


def recv_line(stream) -> dict | None:
    """The next JSON line of ``stream`` (a socket's ``makefile("rb")``); None at end of file.
    Lines are read one at a time: a job that ends at once has its pid and its status arrive in
    one read, and a read of raw bytes would hold both."""
    line = stream.readline()
    return json.loads(line) if line.endswith(b"\n") else None


def connect(path: str | None) -> socket.socket | None:
    """A connection to the server at ``path``; None where none answers (or ``path`` is empty)."""
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    return conn


def request(module: str, args: list[str]) -> dict:
    """The request for ``python -m module args`` as this process's job: its directory and environment."""
    return {"module": module, "args": args, "cwd": os.getcwd(), "env": dict(os.environ)}


def ask(conn: socket.socket, request: dict):
    """Send ``request`` with this process's standard streams; ``(replies, first reply)``."""
    socket.send_fds(conn, [(json.dumps(request) + "\n").encode()], [0, 1, 2])
    replies = conn.makefile("rb")
    return replies, recv_line(replies)


class ServedJob:
    """A job the server forked for this process (:func:`start`), waited on and stopped as a child
    would be (:mod:`lab.supervise`): ``pid`` leads the job's own session (its process group)."""

    def __init__(self, conn: socket.socket, replies, pid: int) -> None:
        self.conn, self.replies, self.pid, self.returncode = conn, replies, pid, None

    def wait(self, timeout: float | None = None) -> int:
        """The job's exit status, or minus the signal that ended it (as ``subprocess.Popen.wait``);
        1, said on stderr, where the server ended first.

        Raises:
            subprocess.TimeoutExpired: if no status came within ``timeout`` s.
        """
        if self.returncode is None:
            self.conn.settimeout(timeout)
            try:
                done = recv_line(self.replies)
            except TimeoutError:
                import subprocess

                raise subprocess.TimeoutExpired(f"job {self.pid}", timeout) from None
            if done is None:
                print(f"[server] the job server ended before job {self.pid}", file=sys.stderr)
            self.returncode = 1 if done is None else done["status"]
            self.replies.close()
            self.conn.close()
        return self.returncode


def start(path: str | None, module: str, args: list[str]) -> ServedJob | None:
    """Ask the server at ``path`` to run ``python -m module args`` as this process's job (its
    streams, directory and environment); None where none answers, where the job needs a variant
    or a fresh process (:func:`lab.server.launch` does both) or nothing started. The server kills
    the job if this process's connection closes first, whenever that is."""
    conn = connect(path)
    replies, reply = ask(conn, request(module, args)) if conn is not None else (None, None)
    if reply is not None and "pid" in reply:
        return ServedJob(conn, replies, reply["pid"])
    if conn is not None:
        replies.close()
        conn.close()
    return None
