"""What this process can get out of the CPUs, read where Linux exposes it, and why.

Each reader returns its value, or ``None`` with the reason it could not be read: a cause is
stated in a finding only where it was measured (docs/architecture.md).

* :func:`cgroup_quota` -- the CPU quota of this process's *own* cgroup, from
  ``/proc/<pid>/cgroup`` and ``/proc/<pid>/mountinfo``: the smallest ``quota / period`` along the
  path from that cgroup to the root of its hierarchy, and the cgroup that set it. cgroup v1
  (``cpu.cfs_quota_us``, ``cpu.cfs_period_us``) where a v1 hierarchy has the ``cpu`` controller,
  else v2 (``cpu.max``). This is what batch schedulers, ``systemd-run -p CPUQuota=`` and
  containers set; the root cgroup, which is all an older version of this lab read, has none.
  The kernel enforces every level's quota (Documentation/admin-guide/cgroup-v2.rst, "cpu"
  interface files; Documentation/scheduler/sched-bwc.rst for v1), so the smallest one binds.
* :func:`throttled_seconds` -- the time the quota's cgroup was throttled (``cpu.stat``:
  ``throttled_time`` ns in v1, ``throttled_usec`` in v2), read at both ends of a window.
* :func:`smt_groups` -- which available CPUs are SMT siblings of one core
  (``/sys/devices/system/cpu/cpu<i>/topology/thread_siblings_list``).
* :func:`steal_seconds` -- CPU time the hypervisor gave to other guests (``/proc/stat``, the
  8th value of a ``cpu<i>`` line, in ``USER_HZ`` ticks; proc(5)).
* :func:`cpu_freq_mhz` -- the current frequency of the available CPUs
  (``cpufreq/scaling_cur_freq``, kHz), absent in most VMs.
* :func:`vm_events` -- the virtual machine stopped and resumed under the guest (restored from a
  snapshot, or cloned), from the kernel's log (``/dev/kmsg``): afterwards its vCPUs may run on
  other host cores, at another speed.

Every reader takes the root of the file system it reads (``proc``, ``sys_root``, ``fs_root``) so
the tests can give it a fixture tree. Nothing here imports torch, pandas or matplotlib.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import time
from pathlib import Path

#: Ticks per second of /proc/stat's CPU times (USER_HZ; 100 on Linux).
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: Index of ``steal`` among a ``cpu`` line's values in /proc/stat (proc(5)).
STEAL_FIELD = 7

CPU_SYS = "/sys/devices/system/cpu"

#: The kernel's log, one record per read: ``<priority>,<sequence>,<microseconds since boot>,
#: <flags>;<message>`` (Documentation/ABI/testing/dev-kmsg), continuation lines indented.
KMSG = "/dev/kmsg"

#: Kernel log messages that mark the virtual machine stopped and resumed under the guest, and
#: what each means. Linux's vmgenid driver (drivers/virt/vmgenid.c, which Firecracker, Hyper-V and
#: QEMU's vmgenid device drive) reseeds the random number generator with this message when the
#: hypervisor changes the VM generation ID: the VM was restored from a snapshot or cloned. Seen on
#: the lab's Firecracker VM in the middle of a run (2026-12-05): a 20 s gap in one job, and one
#: CPU 10% faster in the jobs after it (docs/benchmarks.md).
VM_EVENTS = {"crng reseeded due to virtual machine fork": "VM fork (vmgenid: restored from a snapshot or cloned)"}


@dataclasses.dataclass(frozen=True)
class Quota:
    """The CPU quota that binds a process.

    Attributes:
        cpus: the smallest ``quota / period`` along the cgroup path (CPUs); None when no cgroup
            on the path sets one, or when it could not be read (then ``reason`` says why).
        cgroup: the cgroup (its path inside the hierarchy, e.g. ``/system.slice/job.scope``)
            that sets ``cpus``; None without a quota.
        version: ``v1`` or ``v2``: the hierarchy that holds the ``cpu`` controller.
        directory: the file-system directory of the cgroup that sets the quota (its
            ``cpu.stat`` counts the throttling); None without a quota.
        own: the process's own cgroup (hierarchy path).
        reason: why the quota could not be read; empty when it was.
    """

    cpus: float | None = None
    cgroup: str | None = None
    version: str | None = None
    directory: str | None = None
    own: str | None = None
    reason: str = ""

    def describe(self) -> str:
        """``1.5 CPUs (cgroup v2 /user.slice/job.scope)``, ``none`` or ``unreadable: <why>``."""
        if self.reason:
            return f"unreadable: {self.reason}"
        if self.cpus is None:
            return "none"
        return f"{self.cpus:g} CPUs (cgroup {self.version} {self.cgroup})"


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (``\\040`` is a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def cgroup_mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """``(root, mount point, fstype, super options)`` of every cgroup and cgroup2 mount in the
    text of ``/proc/<pid>/mountinfo`` (proc(5): fields 4 and 5, then after `` - `` the type and
    the super options, which name a v1 hierarchy's controllers)."""
    out = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((_unescape(fields[3]), _unescape(fields[4]), rest[0], set(rest[2].split(","))))
    return out


def _cgroup_dir(path: str, root: str, mount: str, fs_root: str) -> Path | None:
    """The directory of cgroup ``path`` under a mount of its hierarchy whose root is ``root``."""
    if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None
    rel = path[len(root) :] if root != "/" else path
    return Path(fs_root + mount) / rel.lstrip("/")


def _per_period(quota: int, period: int, what: str) -> float:
    if quota <= 0 or period <= 0:
        raise ValueError(f"{what}: quota {quota} per period {period} is not a CPU quota")
    return quota / period


def _v1_quota(directory: Path) -> float | None:
    quota = int((directory / "cpu.cfs_quota_us").read_text())
    if quota == -1:  # no quota at this level (sched-bwc.rst)
        return None
    try:
        period = int((directory / "cpu.cfs_period_us").read_text())
    except FileNotFoundError:
        raise ValueError(f"{directory}/cpu.cfs_quota_us without cpu.cfs_period_us") from None
    return _per_period(quota, period, f"{directory}/cpu.cfs_quota_us")


def _v2_quota(directory: Path) -> float | None:
    fields = (directory / "cpu.max").read_text().split()
    if len(fields) != 2:
        raise ValueError(f"{directory}/cpu.max is not '<quota|max> <period>'")
    return None if fields[0] == "max" else _per_period(int(fields[0]), int(fields[1]), f"{directory}/cpu.max")


def _walk(directory: Path, top: Path, path: str, version: str, read) -> tuple[float | None, str | None, Path | None]:
    """The smallest quota from ``directory`` up to ``top`` (the mount point), its cgroup path
    and directory. A level without the quota files (v2's root cgroup has no ``cpu.max``) sets
    none."""
    best: tuple[float | None, str | None, Path | None] = (None, None, None)
    parts = [p for p in path.split("/") if p]
    while True:
        try:
            cpus = read(directory)
        except FileNotFoundError:
            cpus = None
        if cpus is not None and (best[0] is None or cpus < best[0]):
            best = (cpus, "/" + "/".join(parts), directory)
        if directory == top or not parts:
            return best
        directory, parts = directory.parent, parts[:-1]


def cgroup_quota(pid: int | str = "self", proc: str = "/proc", fs_root: str = "") -> Quota:
    """The CPU quota that binds process ``pid`` (see the module docstring).

    Args:
        pid: a pid or ``self``.
        proc: where procfs is mounted (a fixture tree in tests).
        fs_root: prefix of the mount points that mountinfo names (a fixture tree in tests).

    Returns:
        A :class:`Quota`; its ``reason`` is set (and ``cpus`` None) where the files cannot be
        read, e.g. not Linux, or no mounted hierarchy with the cpu controller.
    """
    try:
        lines = Path(proc, str(pid), "cgroup").read_text().splitlines()
        mounts = cgroup_mounts(Path(proc, str(pid), "mountinfo").read_text())
    except OSError as exc:
        return Quota(reason=f"cannot read {proc}/{pid}/cgroup or mountinfo ({type(exc).__name__})")
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    v1 = [(ctrl, path) for _, ctrl, path in entries if "cpu" in ctrl.split(",")]
    v2 = [path for hid, ctrl, path in entries if hid == "0" and ctrl == ""]
    if v1:
        path, version, read = v1[0][1], "v1", _v1_quota
        found = [(root, mount) for root, mount, fstype, opts in mounts if fstype == "cgroup" and "cpu" in opts]
    elif v2:
        path, version, read = v2[0], "v2", _v2_quota
        found = [(root, mount) for root, mount, fstype, _ in mounts if fstype == "cgroup2"]
    else:
        return Quota(reason=f"{proc}/{pid}/cgroup names no cpu controller and no cgroup v2 hierarchy")
    for root, mount in found:
        directory = _cgroup_dir(path, root, mount, fs_root)
        if directory is None or not directory.is_dir():
            continue
        try:
            cpus, cgroup, where = _walk(directory, Path(fs_root + mount), path, version, read)
        except (OSError, ValueError, IndexError) as exc:
            return Quota(version=version, own=path, reason=f"cannot read the quota under {directory} ({exc})")
        return Quota(cpus, cgroup, version, str(where) if where else None, path)
    return Quota(version=version, own=path, reason=f"cgroup {version} {path} is not under a mounted hierarchy")


def throttled_seconds(quota: Quota) -> float | None:
    """Seconds the cgroup that sets ``quota`` has been throttled so far (``cpu.stat``); None
    without a quota or where the file lacks the counter."""
    if quota.directory is None:
        return None
    try:
        text = Path(quota.directory, "cpu.stat").read_text()
    except OSError:
        return None
    stat = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
    for key, scale in (("throttled_usec", 1e6), ("throttled_time", 1e9)):
        if stat.get(key, "").isdigit():
            return int(stat[key]) / scale
    return None


def parse_cpu_list(text: str) -> list[int]:
    """CPUs of a kernel CPU list such as ``0-3,8,10-11`` (sorted).

    Raises:
        ValueError: for text that is not a CPU list.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first or first < 0:
            raise ValueError(f"{part!r} is not a CPU range")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise ValueError(f"{text!r} names no CPU")
    return sorted(cpus)


def smt_groups(cpus: list[int], sys_root: str = CPU_SYS) -> tuple[list[list[int]] | None, str]:
    """The available CPUs grouped by physical core (SMT siblings together).

    Args:
        cpus: the available logical CPUs (affinity).
        sys_root: ``/sys/devices/system/cpu`` or a fixture tree.

    Returns:
        ``(groups, "")``: one sorted list of available CPUs per core, e.g. ``[[0, 1]]`` for two
        SMT siblings of one core, ``[[0], [1]]`` for two cores; ``(None, reason)`` where a
        ``thread_siblings_list`` cannot be read.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for cpu in cpus:
        f = Path(sys_root, f"cpu{cpu}", "topology", "thread_siblings_list")
        try:
            siblings = tuple(parse_cpu_list(f.read_text()))
        except (OSError, ValueError) as exc:
            return None, f"cannot read {f} ({type(exc).__name__})"
        groups.setdefault(siblings, []).append(cpu)
    return sorted(groups.values()), ""


def read_proc_stat(path: str = "/proc/stat") -> dict[int, list[int]]:
    """Per logical CPU, the tick counters of its ``cpu<i>`` line in ``/proc/stat`` (user,
    nice, system, idle, iowait, irq, softirq, steal, ...; proc(5)).

    Raises:
        OSError: if the file cannot be read.
    """
    out = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"cpu(\d+)((?:\s+\d+)+)\s*$", line)
        if m:
            out[int(m.group(1))] = [int(v) for v in m.group(2).split()]
    return out


def steal_seconds(stat: dict[int, list[int]], cpus: list[int]) -> float | None:
    """Steal time (s) accumulated by ``cpus`` in a :func:`read_proc_stat` reading; None where a
    line lacks the steal column (kernels before 2.6.11)."""
    ticks = 0
    for cpu in cpus:
        values = stat.get(cpu)
        if values is None or len(values) <= STEAL_FIELD:
            return None
        ticks += values[STEAL_FIELD]
    return ticks / CLK_TCK


def cpu_freq_mhz(cpus: list[int], sys_root: str = CPU_SYS) -> tuple[float | None, str]:
    """Mean current frequency of ``cpus`` (MHz) from ``cpufreq/scaling_cur_freq``, or
    ``(None, reason)``: most VMs expose no cpufreq (their /proc/cpuinfo "cpu MHz" is a nominal
    value, not a reading)."""
    values = []
    for cpu in cpus:
        f = Path(sys_root, f"cpu{cpu}", "cpufreq", "scaling_cur_freq")
        try:
            values.append(int(f.read_text()) / 1000.0)
        except (OSError, ValueError):
            return None, f"no readable {f} (no cpufreq driver; common in VMs)"
    return (sum(values) / len(values), "") if values else (None, "no CPUs given")


def snapshot(cpus: list[int]) -> dict:
    """The capacity facts that hold for a whole job: affinity, quota, SMT siblings, frequency and
    the VM's restores since boot (:func:`vm_events`), with the reason for each that could not be
    read (``job.json`` and ``host.json``: ``capacity``)."""
    quota = cgroup_quota()
    groups, smt_why = smt_groups(cpus)
    freq, freq_why = cpu_freq_mhz(cpus)
    events, events_why = vm_events()
    pairs = (("quota", quota.reason), ("smt", smt_why), ("cpu_freq_mhz", freq_why), ("vm_events", events_why))
    unreadable = {k: v for k, v in pairs if v}
    return {
        "affinity": cpus,
        "quota_cpus": quota.cpus,
        "quota_cgroup": quota.cgroup,
        "cgroup_version": quota.version,
        "own_cgroup": quota.own,
        "cores": len(groups) if groups is not None else None,
        "smt_groups": groups,
        "cpu_freq_mhz": freq,
        "vm_events": events,
        "unreadable": unreadable,
    }


def vm_events(path: str = KMSG) -> tuple[list[dict], str]:
    """The :data:`VM_EVENTS` in the kernel's log at ``path``, oldest first, each ``{"unix": s,
    "event": what}``, and why the log could not be read ("" where it was). The log's timestamps
    count from boot on the kernel's clock, which ``CLOCK_MONOTONIC`` follows, so ``unix`` is
    ``time.time() - time.monotonic()`` plus the record's seconds since boot (to a few ms).
    Reading ``/dev/kmsg`` needs root or CAP_SYSLOG where ``kernel.dmesg_restrict`` is 1, and a
    container may have none; the kernel keeps its newest records only (a ring buffer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        fix = (
            "; reading it needs root, CAP_SYSLOG or sysctl kernel.dmesg_restrict=0"
            if exc.errno in (errno.EPERM, errno.EACCES)
            else ""
        )
        return [], f"no readable {path} ({exc.strerror}): a VM restored or cloned under the guest goes unseen{fix}"
    offset, events = time.time() - time.monotonic(), []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)  # one record from /dev/kmsg; a whole file elsewhere
            except BlockingIOError:
                break  # no newer record
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the kernel overwrote records before this one was read
                return events, f"{path} stopped answering ({exc.strerror})"
            if not chunk:
                break
            for line in chunk.decode(errors="replace").splitlines():
                head, sep, message = line.partition(";")
                fields = head.split(",")
                if not sep or len(fields) < 3 or not fields[2].isdigit():
                    continue  # a continuation line (indented key=value) or not a record
                events += [
                    {"unix": round(offset + int(fields[2]) / 1e6, 3), "event": what}
                    for needle, what in VM_EVENTS.items()
                    if needle in message
                ]
    finally:
        os.close(fd)
    return events, ""
