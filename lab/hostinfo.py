"""Machine fingerprint: what this host is, written once per run as ``results/<host>/host.json``.

Fields that cannot be read here are present as ``null`` with the reason under ``unreadable``.
Sources: ``/proc/cpuinfo`` (model, vendor, ISA flags), psutil (cores, frequency, memory, load),
``os.sched_getaffinity`` (available CPUs), :mod:`lab.capacity` (the CPU quota of this
process's own cgroup and the cgroup that sets it, SMT siblings among the available CPUs, their
current frequency: the ``capacity`` block), ``torch.__config__.parallel_info()`` (thread
settings and math libraries, parsed into fields), ``/proc/sys/kernel/sched_*`` (the kernel's
scheduler settings: the ``scheduler`` block).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lab import SCHEMA_VERSION, capacity
from lab.fileio import write_json
from lab.host import affinity, available_cpus, host_label, node_kind

#: ISA flags that decide which PyTorch CPU kernels run (oneDNN, FBGEMM, inductor).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")

LIBRARIES = ("torch", "numpy", "pandas", "matplotlib", "psutil", "jinja2", "scipy", "snakemake")


def cpuinfo() -> dict:
    """``model name``, ``vendor_id`` and ``flags`` of the first CPU in ``/proc/cpuinfo`` (str
    each; ``{}`` where there is no such file)."""
    out: dict = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in ("model name", "vendor_id", "flags") and key not in out:
            out[key] = value
    return out


def node() -> dict:
    """The machine a job runs on: ``hostname``, ``cpu_model``, ``logical_cpus`` and, inside a
    SLURM job, ``slurm_job_id`` (``$SLURM_JOB_ID``; None elsewhere): job.json ``node``; on a
    cluster, which node of the host label's partition it was and which job."""
    return {
        "hostname": platform.node(),
        "cpu_model": cpuinfo().get("model name") or platform.processor() or None,
        "logical_cpus": psutil.cpu_count(logical=True),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


def other_machine(host_json: str | Path) -> str | None:
    """Why the host directory of ``host_json`` (results/<label>/host.json) belongs to another
    machine than this one, or None where it does not, or there is none, or it does not say:
    the CPU model or the count of logical CPUs differ (the test by which the analysis sets a
    point measured on another node aside, :func:`analysis.load.mark_other_nodes`). A local run
    under that label would measure every point, then set each aside; the Snakefile refuses it
    before. A file that cannot be read is left to the analysis, which names it."""
    from lab.fileio import read_json_object

    try:
        host = read_json_object(host_json)
    except (OSError, ValueError):
        return None
    want, here = node_kind(host), node()
    if want == (None, None) or want == node_kind(here):
        return None
    return (
        f"{host_json} describes another machine ({host.get('hostname')}, {want[0]}, {want[1]} CPUs),"
        f" not this one ({here['hostname']}, {here['cpu_model']}, {here['logical_cpus']} CPUs): every point"
        " measured under its label would be set aside as measured on another node"
    )


def parse_parallel_info(text: str) -> dict:
    """Parse ``torch.__config__.parallel_info()`` into fields.

    Returns keys ``aten_parallel_backend``, ``at_num_threads``, ``at_num_interop_threads``,
    ``omp_max_threads``, ``mkl_max_threads``, ``mkl_version``, ``onednn_version`` (None when the
    line is absent).
    """

    def grab(pattern: str, conv=str):
        m = re.search(pattern, text, re.MULTILINE)
        return conv(m.group(1).strip()) if m else None

    return {
        "aten_parallel_backend": grab(r"^ATen parallel backend:\s*(.+)$"),
        "at_num_threads": grab(r"at::get_num_threads\(\)\s*:\s*(\d+)", int),
        "at_num_interop_threads": grab(r"at::get_num_interop_threads\(\)\s*:\s*(\d+)", int),
        "omp_max_threads": grab(r"omp_get_max_threads\(\)\s*:\s*(\d+)", int),
        "mkl_max_threads": grab(r"mkl_get_max_threads\(\)\s*:\s*(\d+)", int),
        "mkl_version": grab(r"^(Intel\(R\) (?:oneAPI )?Math Kernel Library Version [^\s]+)"),
        "onednn_version": grab(r"^(Intel\(R\) MKL-DNN v[\d.]+|oneDNN v[\d.]+)"),
    }


def _git_commit(repo: Path) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu(unreadable: dict[str, str]) -> dict:
    """CPU model, counts, ISA flags, frequency and governor; unreadable ones noted."""
    info = cpuinfo()
    flags = set(info.get("flags", "").split())
    freq = psutil.cpu_freq()
    if freq is None:
        unreadable["cpu_freq_mhz"] = "psutil.cpu_freq() returned None"
    elif not freq.max:
        unreadable["cpu_freq_max_mhz"] = "psutil.cpu_freq().max is 0 (not exposed, common in VMs)"
    governor = None
    try:
        governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip()
    except OSError:
        unreadable["governor"] = "no /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor (common in VMs)"
    cap = capacity.snapshot(affinity())
    if "quota" in cap["unreadable"]:
        unreadable["cgroup_quota_cpus"] = cap["unreadable"]["quota"]
    physical = psutil.cpu_count(logical=False)
    if physical is None:
        unreadable["physical_cores"] = "psutil.cpu_count(logical=False) returned None"
    return {
        "cpu_model": info.get("model name") or platform.processor() or None,
        "cpu_vendor": info.get("vendor_id"),
        "logical_cpus": psutil.cpu_count(logical=True),
        "physical_cores": physical,
        "available_cpus": available_cpus(),
        "affinity": affinity(),
        "cgroup_quota_cpus": cap["quota_cpus"],
        "cgroup_quota_cgroup": cap["quota_cgroup"],
        "capacity": cap,
        "isa": {f: (f in flags) for f in ISA_FLAGS},
        "cpu_freq_mhz": round(freq.current, 1) if freq else None,
        "cpu_freq_max_mhz": round(freq.max, 1) if freq and freq.max else None,
        "governor": governor,
    }


#: Where the kernel's scheduler settings live: ``kernel.sched_*`` (sysctl).
SCHED_SYSCTL_DIR = Path("/proc/sys/kernel")


def scheduler_settings(root: Path = SCHED_SYSCTL_DIR) -> dict[str, str]:
    """The kernel's scheduler settings, ``kernel.sched_*``: name -> value as the file reads
    (whitespace collapsed), every readable one; ``{}`` where there are none. They decide where
    threads and freshly forked processes run; a guest kernel may add its own (a Firecracker VM
    of this project's CI has ``sched_vcpu_pack``, not in mainline Linux), so none is
    interpreted here: the report shows them beside the measurements."""
    out = {}
    try:
        paths = sorted(root.glob("sched_*"))
    except OSError:
        return out
    for path in paths:
        try:
            out[path.name] = " ".join(path.read_text().split())
        except OSError:
            continue
    return out


def _software(unreadable: dict[str, str]) -> dict:
    """Python, torch (with its parallel settings) and library versions, the git commit."""
    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[lib] = None
    import torch

    parallel_info = torch.__config__.parallel_info()
    commit = _git_commit(Path(__file__).resolve().parent.parent)
    if commit is None:
        unreadable["git_commit"] = "not a git checkout, or git not found"
    return {
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "gil_enabled": sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True,
        "torch_version": torch.__version__,
        "torch_parallel": parse_parallel_info(parallel_info),
        "torch_parallel_info": parallel_info,
        "library_versions": versions,
        "git_commit": commit,
    }


def collect(host: str) -> dict:
    """Collect the fingerprint of this machine (see the module docstring); never raises on
    an unreadable field: it is ``None`` and ``unreadable[field]`` says why."""
    unreadable: dict[str, str] = {}
    return {
        "host": host,
        "schema_version": SCHEMA_VERSION,
        "hostname": platform.node(),
        "collected_unix": time.time(),
        **_cpu(unreadable),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 2),
        "os": platform.platform(),
        "kernel": platform.release(),
        "scheduler": scheduler_settings(),
        **_software(unreadable),
        "load_avg_1_5_15": list(os.getloadavg()),
        "unreadable": unreadable,
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.hostinfo --out results/<host>/host.json [--host LABEL]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="path of host.json to write")
    p.add_argument("--host", default=None, help="host label (default: sanitised hostname)")
    args = p.parse_args(argv)
    host = host_label(args.host)
    out = Path(args.out)
    write_json(out, collect(host), sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
