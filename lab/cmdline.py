"""Another process's command line as the lab records it: short, and without its secrets.

The processes that took CPU during a window are named in ``metrics.csv`` (``top_other``),
``job.json`` and the report (:mod:`lab.sampler` reads them at the window's edges), which travel
with ``results/<host>/`` to other machines and readers.
"""

from __future__ import annotations

import os
import re

import psutil


def short_cmdline(pid: int, name: str, limit: int = 60) -> str:
    """The command line of ``pid`` with paths cut to their last component, at most ``limit``
    characters (``python train.py --epochs 3``); the process name where it cannot be read
    (kernel threads have none). A process working in another directory than this one (and not
    in ``/``, where daemons work) gets it appended, its last :data:`CWD_CHARS` characters:
    ``python -m lab.server run [in /tmp/pytest-of-u/pytest-3/quick0]`` tells another checkout's
    pipeline from this one's."""
    try:
        proc = psutil.Process(pid)
        argv = proc.cmdline()
    except (psutil.Error, OSError):
        return name
    text = " ".join(os.path.basename(a) if a.startswith("/") else a for a in redact(argv)) or name
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    try:
        cwd = proc.cwd()
    except (psutil.Error, OSError):
        return text
    if cwd in ("", "/") or cwd == os.getcwd():
        return text
    return f"{text} [in {cwd if len(cwd) <= CWD_CHARS else '...' + cwd[-CWD_CHARS + 3 :]}]"


#: Words in an option or variable name whose value :func:`redact` hides.
SECRET_WORDS = re.compile(r"pass(word|wd)?|secret|token|api[-_]?key|auth|credential", re.IGNORECASE)


#: The user and password of a URL (``scheme://user:secret@host``).
URL_CREDENTIALS = re.compile(r"://[^/@\s]+@")

#: A header or ``key: value`` argument whose key names a secret (``Authorization: Bearer x``).
SECRET_HEADER = re.compile(r"^((?:[\w-]*(?:auth|token|secret|pass|api[-_]?key)[\w-]*)\s*:\s*)\S", re.IGNORECASE)


def redact(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking options hidden (``--password=***``,
    ``--token ***``, ``DB_PASSWORD=***``, ``mysql -p***``, ``https://***@host``,
    ``Authorization: ***``), since a process's command line
    travels with ``results/<host>/`` into a report that is meant to be shared: the name of the
    option stays, so a reader still sees what ran."""
    out, hide_next = [], False
    for a in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        a = URL_CREDENTIALS.sub("://***@", a)  # postgresql://user:pw@host, https://user:token@host
        if not a.startswith("-") and SECRET_HEADER.match(a):  # curl -H "Authorization: Bearer x"
            out.append(SECRET_HEADER.match(a).group(1) + "***")
            continue
        key, eq, _value = a.partition("=")
        if eq and SECRET_WORDS.search(key):
            out.append(f"{key}=***")
        elif a.startswith("-") and SECRET_WORDS.search(a):
            out.append(a)
            hide_next = True
        elif a.startswith("-p") and len(a) > 2 and os.path.basename(argv[0]).startswith(("mysql", "mariadb")):
            out.append("-p***")  # mysql -pSECRET
        else:
            out.append(a)
    return out


#: Characters of another process's working directory that :func:`short_cmdline` keeps (the tail).
CWD_CHARS = 48
