"""What limits the CPUs, read where Linux exposes it (lab/capacity.py), the processes
outside the job that took CPU (the sampler), the intervals and the adaptive rounds."""

from __future__ import annotations

import errno
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from helpers import start_busy_stranger, venv_env

from lab import capacity
from lab.intervals import median_ci, order_index
from lab.rounds import Rounds
from lab.window import CONTENDED_PCT

# ------------------------------------------------------------------ cgroup quota


def _tree(root: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> None:
    """A fixture /proc/self (cgroup, mountinfo) and cgroup files under ``root``."""
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text(cgroup)
    (root / "proc" / "self" / "mountinfo").write_text(mountinfo)
    for rel, text in files.items():
        f = root / rel.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)


V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_v2_quota_is_the_smallest_along_the_path_naming_its_cgroup(tmp_path):
    _tree(
        tmp_path,
        "0::/batch.slice/job-42.scope/step\n",
        "22 1 8:1 / / rw - ext4 /dev/vda1 rw\n" + V2_MOUNT,
        {
            "/sys/fs/cgroup/batch.slice/cpu.max": "400000 100000\n",  # 4 CPUs
            "/sys/fs/cgroup/batch.slice/job-42.scope/cpu.max": "150000 100000\n",  # 1.5 CPUs: binds
            "/sys/fs/cgroup/batch.slice/job-42.scope/step/cpu.max": "max 100000\n",
            "/sys/fs/cgroup/batch.slice/job-42.scope/cpu.stat": "usage_usec 9\nnr_throttled 3\nthrottled_usec 250000\n",
        },
    )
    q = capacity.cgroup_quota(proc=str(tmp_path / "proc"), fs_root=str(tmp_path))
    assert (q.cpus, q.cgroup, q.version, q.reason) == (1.5, "/batch.slice/job-42.scope", "v2", "")
    assert q.own == "/batch.slice/job-42.scope/step"
    assert capacity.throttled_seconds(q) == 0.25
    assert q.describe() == "1.5 CPUs (cgroup v2 /batch.slice/job-42.scope)"


def test_v2_without_a_quota_and_a_mount_point_with_a_space(tmp_path):
    mount = "31 23 0:27 / /sys/fs/my\\040cgroups rw - cgroup2 cgroup2 rw\n"
    _tree(tmp_path, "0::/user.slice\n", mount, {"/sys/fs/my cgroups/user.slice/cpu.max": "max 100000\n"})
    q = capacity.cgroup_quota(proc=str(tmp_path / "proc"), fs_root=str(tmp_path))
    assert q.cpus is None and q.cgroup is None and q.reason == "" and q.describe() == "none"
    assert capacity.throttled_seconds(q) is None


def test_v1_quota_under_a_container_root(tmp_path):
    """A container sees its cgroup as the mount's root (field 4 of mountinfo)."""
    _tree(
        tmp_path,
        "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc/inner\n0::/\n",
        "40 31 0:37 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n" + V2_MOUNT,
        {
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpu,cpuacct/inner/cpu.cfs_quota_us": "-1\n",
            "/sys/fs/cgroup/cpu,cpuacct/inner/cpu.cfs_period_us": "100000\n",
        },
    )
    q = capacity.cgroup_quota(proc=str(tmp_path / "proc"), fs_root=str(tmp_path))
    assert (q.cpus, q.cgroup, q.version) == (2.0, "/docker/abc", "v1")


def test_quota_unreadable_says_why(tmp_path):
    q = capacity.cgroup_quota(proc=str(tmp_path / "nowhere"))
    assert q.cpus is None and "cannot read" in q.reason and q.describe().startswith("unreadable")
    _tree(tmp_path, "5:memory:/x\n", "", {})
    q = capacity.cgroup_quota(proc=str(tmp_path / "proc"), fs_root=str(tmp_path))
    assert "no cpu controller" in q.reason


@pytest.mark.parametrize(
    "files, why",
    [
        ({"/sys/fs/cgroup/job/cpu.max": "50000 0\n"}, "quota 50000 per period 0 is not a CPU quota"),
        ({"/sys/fs/cgroup/job/cpu.max": "-1 100000\n"}, "quota -1 per period 100000 is not a CPU quota"),
        ({"/sys/fs/cgroup/job/cpu.max": "garbage\n"}, "is not '<quota|max> <period>'"),
    ],
)
def test_a_malformed_v2_quota_is_unreadable_not_a_number(tmp_path, files, why):
    _tree(tmp_path, "0::/job\n", V2_MOUNT, files)
    q = capacity.cgroup_quota(proc=str(tmp_path / "proc"), fs_root=str(tmp_path))
    assert q.cpus is None and why in q.reason and q.describe().startswith("unreadable"), q


def test_a_v1_quota_without_its_period_is_unreadable(tmp_path):
    mount = "40 23 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    _tree(tmp_path, "4:cpu,cpuacct:/job\n", mount, {"/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "50000\n"})
    q = capacity.cgroup_quota(proc=str(tmp_path / "proc"), fs_root=str(tmp_path))
    assert q.cpus is None and "without cpu.cfs_period_us" in q.reason, q


def test_quota_of_a_real_child_cgroup(child_cgroup):
    code = (
        "import json; from lab import capacity, host; q = capacity.cgroup_quota();"
        "print(json.dumps([q.cpus, q.cgroup, q.version, host.available_cpus(), capacity.throttled_seconds(q)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, preexec_fn=child_cgroup.enter
    )
    cpus, cgroup, version, available, throttled = __import__("json").loads(out.stdout)
    assert (cpus, cgroup, version, available) == (1.0, child_cgroup.cgroup, child_cgroup.version, 1)
    assert throttled is not None and throttled >= 0
    assert capacity.cgroup_quota().cgroup != child_cgroup.cgroup  # this process is not in it


# ------------------------------------------------------------------ SMT, steal, frequency

STAT = """cpu  100 0 50 1000 5 0 1 40 0 0
cpu0 60 0 30 500 3 0 1 30 0 0
cpu1 40 0 20 500 2 0 0 10 0 0
intr 12345
"""


def test_steal_is_read_per_available_cpu(tmp_path):
    f = tmp_path / "stat"
    f.write_text(STAT)
    stat = capacity.read_proc_stat(str(f))
    assert sorted(stat) == [0, 1]
    assert capacity.steal_seconds(stat, [0, 1]) == 40 / capacity.CLK_TCK
    assert capacity.steal_seconds(stat, [1]) == 10 / capacity.CLK_TCK
    assert capacity.steal_seconds({0: [1, 2, 3]}, [0]) is None  # an old kernel without steal
    f.write_text("cpu0 garbage here\ncpu1 1 2 3 4 5 6 7 9\n")
    assert capacity.read_proc_stat(str(f)) == {1: [1, 2, 3, 4, 5, 6, 7, 9]}


def _topology(root: Path, siblings: dict[int, str]) -> None:
    for cpu, text in siblings.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")


def test_smt_siblings_grouped_by_core(tmp_path):
    _topology(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert capacity.smt_groups([0, 1, 2, 3], str(tmp_path)) == ([[0, 2], [1, 3]], "")
    assert capacity.smt_groups([0, 2], str(tmp_path)) == ([[0, 2]], "")  # two CPUs, one core
    assert capacity.smt_groups([0, 1], str(tmp_path)) == ([[0], [1]], "")
    groups, why = capacity.smt_groups([0, 7], str(tmp_path))
    assert groups is None and "cpu7" in why
    assert capacity.parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    for bad in ("", "3-1", "x"):  # an empty or reversed list is unreadable, not one core of all CPUs
        with pytest.raises(ValueError):
            capacity.parse_cpu_list(bad)
    _topology(tmp_path / "empty", {0: "", 1: ""})
    groups, why = capacity.smt_groups([0, 1], str(tmp_path / "empty"))
    assert groups is None and "cpu0" in why


def test_frequency_read_or_unreadable(tmp_path):
    for cpu, khz in ((0, 2000000), (1, 3000000)):
        d = tmp_path / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_cur_freq").write_text(f"{khz}\n")
    assert capacity.cpu_freq_mhz([0, 1], str(tmp_path)) == (2500.0, "")
    mhz, why = capacity.cpu_freq_mhz([0, 5], str(tmp_path))
    assert mhz is None and "cpu5" in why


def test_snapshot_of_this_machine_holds_every_fact_or_its_reason():
    snap = capacity.snapshot(sorted(os.sched_getaffinity(0)))
    for key, why in (("quota_cpus", "quota"), ("smt_groups", "smt"), ("cpu_freq_mhz", "cpu_freq_mhz")):
        if snap[key] is None and not (key == "quota_cpus" and snap["cgroup_version"]):
            assert why in snap["unreadable"], (key, snap)
    # the kernel log was read (a list, maybe empty) or its reason is given
    assert isinstance(snap["vm_events"], list)
    assert os.access(capacity.KMSG, os.R_OK) or "vm_events" in snap["unreadable"]


def test_vm_forks_are_read_from_the_kernel_log_with_their_unix_time(tmp_path):
    """Records in /dev/kmsg's format (Documentation/ABI/testing/dev-kmsg): a continuation line,
    another message and a record without a timestamp are no events; the vmgenid reseed is one,
    at the record's seconds since boot on the monotonic clock's axis."""
    log = tmp_path / "kmsg"
    log.write_text(
        "6,100,1500000,-;virtio_blk virtio1: [vda] new size\n"
        " SUBSYSTEM=virtio\n"
        "5,101,58631114565,-;random: crng reseeded due to virtual machine fork\n"
        "5,102,x,-;random: crng reseeded due to virtual machine fork\n"
    )
    offset = time.time() - time.monotonic()
    events, why = capacity.vm_events(str(log))
    assert why == "" and len(events) == 1
    assert events[0]["event"].startswith("VM fork")
    assert events[0]["unix"] == pytest.approx(offset + 58631.114565, abs=0.05)
    events, why = capacity.vm_events(str(tmp_path / "absent"))
    assert events == [] and "absent" in why and "unseen" in why and "CAP_SYSLOG" not in why


def test_a_kernel_log_refused_says_what_reading_it_needs(monkeypatch):
    """Where kernel.dmesg_restrict is 1 and the job has no CAP_SYSLOG, opening /dev/kmsg fails
    with EPERM (tried by hand with setpriv --bounding-set -syslog); the reason says what helps."""

    def refuse(path, flags):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(capacity.os, "open", refuse)
    events, why = capacity.vm_events()
    assert events == [] and "/dev/kmsg (Operation not permitted)" in why and "needs root, CAP_SYSLOG" in why


# ------------------------------------------------------------------ interference named


def test_a_busy_process_outside_the_tree_is_named():
    from lab.window import Meter

    busy = start_busy_stranger()
    stranger = psutil.Process(busy)
    try:
        time.sleep(0.3)
        with Meter(sample_hz=10) as meter:
            before, t0 = sum(stranger.cpu_times()[:2]), time.perf_counter()
            with meter.window() as win:
                time.sleep(1.0)
            # the kernel's account of the stranger over a span that brackets the window
            own_pct = 100 * (sum(stranger.cpu_times()[:2]) - before) / (time.perf_counter() - t0)
    finally:
        os.kill(busy, 9)
    cols = win.columns()
    assert win.others and win.others[0][0] == busy, win.others
    assert cols["top_other_pid"] == busy and cols["top_other"].startswith("python")
    assert "while True" in cols["top_other"]
    # the sampler's edge readings give the stranger the CPU time the kernel gave it (the edges
    # bracket the window by a few ms, and /proc counts 10 ms ticks)
    assert abs(cols["top_other_cpu_pct"] - own_pct) <= 10, (cols, own_pct)
    assert cols["interference_pct"] >= 0.8 * own_pct and cols["contended"] is (own_pct > CONTENDED_PCT)
    assert math.isnan(cols["steal_pct"]) or 0 <= cols["steal_pct"] <= 100


def test_cpu_pressure_is_read_from_psi_and_absent_without_it(tmp_path):
    from lab.pressure import cpu_wait_us

    psi = tmp_path / "cpu"
    psi.write_text("some avg10=1.47 avg60=11.85 avg300=8.27 total=39825381\nfull avg10=0.00 total=0\n")
    assert cpu_wait_us(str(psi)) == 39825381.0
    psi.write_text("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")  # not the some line
    assert cpu_wait_us(str(psi)) is None
    assert cpu_wait_us(str(tmp_path / "absent")) is None  # CONFIG_PSI off: no file


def test_oversubscribed_needs_more_threads_than_cpus_and_where_measured_a_wait():
    from lab.pressure import WAITED_PCT, oversubscribed

    assert not oversubscribed(2, 2, 90.0)  # as many as the CPUs: nothing to oversubscribe
    assert oversubscribed(4, 2, float("nan"))  # no PSI: the count decides
    assert oversubscribed(4, 2, WAITED_PCT + 1)
    assert not oversubscribed(4, 2, WAITED_PCT)  # workers that sleep: nothing waited


def test_a_window_of_more_busy_processes_than_cpus_reads_their_wait_for_a_cpu():
    """More busy-looping processes than available CPUs: one always waits on a run queue, which
    the kernel's CPU pressure counts (PSI ``some``); a window of the same length in which the
    job sleeps reads less of it (other processes may still wait)."""
    from lab.host import affinity
    from lab.pressure import WAITED_PCT, cpu_wait_us
    from lab.window import Meter

    if cpu_wait_us() is None:
        pytest.skip("this kernel has no CPU pressure (PSI: /proc/pressure/cpu unreadable)")
    spin = [sys.executable, "-c", "import time; t = time.time() + 1.0\nwhile time.time() < t: pass"]
    with Meter(sample_hz=10) as meter:
        with meter.window() as idle:
            time.sleep(0.8)
        with meter.window() as busy:
            procs = [subprocess.Popen(spin) for _ in range(len(affinity()) + 1)]
            for proc in procs:
                proc.wait()
    assert busy.cpu_wait_pct > WAITED_PCT, (busy.cpu_wait_pct, idle.cpu_wait_pct)
    assert busy.cpu_wait_pct > idle.cpu_wait_pct, (busy.cpu_wait_pct, idle.cpu_wait_pct)
    assert busy.columns()["cpu_wait_pct"] == busy.cpu_wait_pct


def test_our_own_children_are_not_others():
    from lab.window import Meter

    with Meter(sample_hz=10) as meter:
        with meter.window() as win:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            child = subprocess.Popen(
                [sys.executable, "-c", "import time; t = time.time() + 0.8\nwhile time.time() < t: pass"]
            )
            child.wait()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert child.pid not in [o[0] for o in win.others]
    child_cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    # the child's CPU time (the kernel's account, read by its parent when it reaped it) is the tree's
    assert child_cpu_s > 0 and win.cpu_s >= 0.95 * child_cpu_s, (win.cpu_s, child_cpu_s)


_SHORT_WINDOWS = """
import json, time
from lab.window import Meter

spent = []
with Meter(sample_hz=10) as meter:
    for _ in range(10):
        with meter.window() as win:
            t0 = time.thread_time()
            end = time.perf_counter() + 0.002
            while time.perf_counter() < end:
                pass
            thread_s = time.thread_time() - t0
        spent.append((win.cpu_s, thread_s, win.wall_s, win.cpu_util_pct))
print(json.dumps(spent))
"""


def test_a_window_shorter_than_a_clock_tick_reads_its_cpu_time():
    """Ten 2 ms windows of a busy loop, in a process of their own: the meter reads the process
    tree's CPU time, and in the test session's own process that tree holds the side runs'
    pipelines, whose CPU time moves in 10 ms ticks (one read 6.0 ms in a 2.0 ms window in CI)."""
    from conftest import ROOT

    proc = subprocess.run([sys.executable, "-c", _SHORT_WINDOWS], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    spent = json.loads(proc.stdout)
    assert len(spent) == 10, spent
    for cpu_s, thread_s, wall_s, util in spent:
        # the kernel's account of this thread's loop (CLOCK_THREAD_CPUTIME_ID, ns) is inside the
        # tree's; /proc's 10 ms ticks read most such windows as 0 s
        assert thread_s > 0 and cpu_s >= 0.9 * thread_s, spent
        assert cpu_s <= wall_s * os.cpu_count() + 0.001 and util > 0, spent


def test_top_others_counts_new_processes_and_skips_reused_pids():
    from lab.sampler import top_others

    before = {10: (100, 5.0, "a"), 11: (200, 1.0, "b"), 12: (300, 9.0, "c")}
    after = {10: (100, 5.5, "a"), 11: (999, 0.4, "b2"), 12: (300, 9.0, "c"), 13: (400, 0.9, "d"), 14: (1, 3.0, "me")}
    got = top_others(before, after, exclude={14}, wall_s=1.0)
    # pid 11 was reused (another start time): all 0.4 s are the new process's
    assert [(pid, name) for pid, name, _, _ in got] == [(13, "d"), (10, "a"), (11, "b2")]
    assert [round(cpu, 3) for *_, cpu in got] == [0.9, 0.5, 0.4]


def test_process_times_reads_names_with_parentheses_and_skips_what_ended(tmp_path):
    """``/proc/<pid>/stat`` as proc(5) writes it: the name in parentheses (it may hold spaces
    and parentheses of its own), then the fields; a process reaped before its file was read
    (an empty read), a pid gone before the open, and entries that are not pids are left out."""
    from lab.capacity import CLK_TCK
    from lab.sampler import process_times

    fields = ["S", "1"] + ["0"] * 9 + ["250", "50"] + ["7", "9"] + ["0"] * 4 + ["12345"] + ["0"] * 30
    for pid, name in ((41, "a) (b c"), (42, "kworker/0:1")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_bytes(f"{pid} ({name}) {' '.join(fields)}\n".encode())
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "stat").write_bytes(b"")
    (tmp_path / "44").mkdir()  # no stat: gone before the open
    (tmp_path / "self").mkdir()
    got = process_times(str(tmp_path))
    assert got == {41: (12345, 300 / CLK_TCK, "a) (b c"), 42: (12345, 300 / CLK_TCK, "kworker/0:1")}
    mine = process_times()[os.getpid()]
    own = os.times()
    assert abs(mine[1] - (own.user + own.system)) <= 2 / CLK_TCK + 0.01, (mine, own)


# ------------------------------------------------------------------ intervals and rounds


def test_median_ci_matches_scipy_quantile_test():
    from scipy import stats

    rng = np.random.default_rng(0)
    for n in range(1, 40):
        x = rng.lognormal(0, 0.2, n)
        ours = median_ci(x)
        if n < 6:
            assert all(math.isnan(v) for v in ours) and order_index(n) is None
            continue
        ref = stats.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(0.95)
        assert ours == (ref.low, ref.high), n


def test_order_index_beyond_exact_arithmetic_agrees_with_it():
    from lab import intervals

    n = intervals.EXACT_UP_TO + 1
    total, below, exact = 2**n, 0, None
    for k in range(1, (n + 1) // 2 + 1):
        below += math.comb(n, k - 1)
        if 1 - 2 * below / total < 0.95:
            break
        exact = k
    assert order_index(n) == exact == 470
    assert 19700 < order_index(40_000) < 19900  # n/2 - 1.96 sqrt(n)/2 = 19804


def test_median_ci_coverage_holds_its_level_where_the_bootstrap_did_not():
    """Simulated with a known median (log-normal noise, sd 0.12, the noise of a window ratio
    here): the order-statistic interval covers the median at least 95% of the time at 6 and
    9 values; the percentile bootstrap it replaced covered it about 82% at 9."""
    from analysis.stats import median_ci as analysis_ci

    rng = np.random.default_rng(1)
    for n in (6, 9):
        hits = [lo <= 1.0 <= hi for lo, hi in (analysis_ci(rng.lognormal(0, 0.12, n)) for _ in range(2000))]
        assert np.mean(hits) >= 0.94, (n, np.mean(hits))


def test_rounds_decide():
    fixed = Rounds(3)
    assert [fixed.decide(n, 0.0, [], []) for n in (1, 2, 3)] == [None, None, "fixed"]
    tight = Rounds(6, target_ci_pct=5, budget_s=100, max_rounds=20, metric="m")
    same = [2.0] * 6
    assert tight.decide(5, 1.0, same[:5], [1.0] * 5) is None  # below min_rounds
    assert tight.decide(6, 1.0, same, [1.0] * 6) == "target"  # ratios all 2.0: zero width
    noisy = list(np.random.default_rng(0).lognormal(0, 0.3, 12))
    assert tight.decide(12, 1.0, noisy, [1.0] * 12) is None
    assert tight.decide(12, 95.0, noisy, [1.0] * 12) == "budget"  # a 13th round would end past 100 s
    assert Rounds(6, 5, 1e9, 12, "m").decide(12, 1.0, noisy, [1.0] * 12) == "max_rounds"
    rec = tight.record(12, "budget", 95.0, noisy, [1.0] * 12)
    assert rec["done"] == 12 and rec["ci_half_width_pct"] > 5 and rec["metric"] == "m"
    with pytest.raises(ValueError, match="max_rounds"):
        Rounds(6, target_ci_pct=5, max_rounds=3, metric="m")


def test_a_point_that_beats_its_baseline_goes_by_the_lead_target_and_budget():
    """The first screen's candidates (median speedup above 1) get the lead target and budget;
    a point that loses, and the baseline's own job, keep the usual ones; a later worker keeps
    what is left of the lead budget."""
    rng = np.random.default_rng(2)
    ratios = list(rng.lognormal(0, 0.04, 8))  # a half-width of a few % after 8 rounds
    policy = Rounds(6, 10.0, 4.0, 30, "m", lead_target_ci_pct=1.0, lead_budget_s=6.0)
    winning, losing = [1.5 * r for r in ratios], [0.5 * r for r in ratios]
    half = policy.record(8, "x", 0, winning, [1.0] * 8)["ci_half_width_pct"]
    assert 1.0 < half <= 10.0, half  # the usual target is met, the lead one is not
    assert policy.decide(8, 2.0, losing, [1.0] * 8) == "target"
    assert policy.decide(8, 2.0, winning, [1.0] * 8) is None
    assert policy.decide(8, 4.0, winning, [1.0] * 8) is None  # a 9th round ends at 4.5 s: inside 6 s
    assert policy.decide(8, 5.5, winning, [1.0] * 8) == "budget"
    assert Rounds(6, 10.0, 4.0, 30, "m").decide(8, 2.0, winning, [1.0] * 8) == "target"  # no lead values
    assert policy.record(8, "budget", 5.5, winning, [1.0] * 8)["lead"] is True
    assert policy.record(8, "target", 2.0, losing, [1.0] * 8)["lead"] is False
    # the baseline's own job (no baseline): judged on its metric, never a lead
    own = [50.0 * r for r in ratios]  # its metric, a half-width of a few % as the ratios'
    assert policy.record(8, "target", 2.0, own, [])["lead"] is False
    assert policy.decide(8, 2.0, own, []) == "target"  # the usual 10% target, not the lead 1%
    last = policy.for_worker(2, 6, 2.5, winning[:6], [1.0] * 6)
    assert last.lead_budget_s == pytest.approx(3.5) and last.budget_s == pytest.approx(1.5)
    assert last.record(2, "x", 0, winning[6:], [1.0] * 2)["lead"] is True  # the earlier workers' rounds count
    assert last.decide(2, 2.0, winning[6:], [1.0] * 2) is None  # a 3rd round ends at 3 s: inside the lead 3.5 s left
    with pytest.raises(ValueError, match="lead_budget_s"):
        Rounds(6, 5, 4, 30, "m", lead_budget_s=-1)


def test_adaptive_rounds_stop_on_target_and_on_budget():
    from experiments.gil import measure as gil

    p = gil.Params(workload="io", mode="threads", workers=2, io_iterations=2, warmup=0, repeats=6)
    base = gil.Params(workload="io", mode="sequential", workers=2, io_iterations=2, warmup=0, repeats=6)
    # sleeping threads: the ratio is about 2.00 every round, so a 10% target is reached, after 6
    # rounds on an idle machine (12 in a CI run where kdamond contended most points)
    res = gil.run(p, base, rounds=Rounds(6, 10.0, 30.0, 40, "tasks_per_s"))
    assert res.rounds["stopped"] == "target" and 6 <= res.rounds["done"] < 40, res.rounds
    assert res.rounds["ci_half_width_pct"] <= 10.0, res.rounds
    assert {r["rounds_stopped"] for r in res.rows} == {"target"}
    # an impossible target: the budget ends it, after at least the 6 rounds
    res = gil.run(p, base, rounds=Rounds(6, 0.001, 1.0, 40, "tasks_per_s"))
    assert res.rounds["stopped"] == "budget" and 6 <= res.rounds["done"] < 40, res.rounds
    assert res.rounds["elapsed_s"] <= 1.0 + 0.5
    assert len([r for r in res.rows if r["role"] == "point"]) == res.rounds["done"]


def test_the_chain_that_started_the_job_is_counted_apart():
    """Snakemake, its shell and the supervisor (the job's ancestors) are the lab's own overhead:
    their CPU is pipeline_cpu_s, not a process named as interference."""
    from lab.sampler import ancestors, cpu_between, top_others

    before = {1: (1, 10.0, "init"), 50: (5, 2.0, "snakemake"), 60: (6, 1.0, "python")}
    after = {1: (1, 10.0, "init"), 50: (5, 2.3, "snakemake"), 60: (6, 1.6, "python"), 70: (7, 0.2, "sh")}
    assert cpu_between(before, after, {50, 70}) == pytest.approx(0.5)  # sh started in between: all of it
    assert [o[0] for o in top_others(before, after, {50}, wall_s=1.0)] == [60, 70]
    from lab.sampler import is_snakemake

    assert is_snakemake([b"/venv/bin/python3", b"/venv/bin/snakemake", b"--cores", b"4"])
    assert is_snakemake([b"python", b"-m", b"snakemake", b"--executor", b"slurm-jobstep"])
    conda = [b"/bin/bash", b"-c", b"source /opt/conda/bin/activate '/w/.snakemake/conda/ab12'; python -m x"]
    assert not is_snakemake(conda)  # a rule's shell under --use-conda is not Snakemake itself
    assert ancestors(os.getpid()) == set()  # pytest was not started by Snakemake
    code = "import os; from lab.sampler import ancestors; print(sorted(ancestors(os.getpid())))"
    shell = f"exec -a snakemake sh -c '{sys.executable} -c \"{code}\"'"
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True, env=venv_env())
    chain = eval(out.stdout)
    assert len(chain) == 1  # the sh named snakemake: the chain stops there


def test_throttling_counter_that_is_not_a_number_is_unread(tmp_path):
    (tmp_path / "cpu.stat").write_text("nr_periods 10\nthrottled_usec n/a\n")
    assert capacity.throttled_seconds(capacity.Quota(cpus=0.5, directory=str(tmp_path))) is None
    (tmp_path / "cpu.stat").write_text("nr_periods 10\nthrottled_usec 2500000\n")
    assert capacity.throttled_seconds(capacity.Quota(cpus=0.5, directory=str(tmp_path))) == 2.5


def test_contention_over_several_windows_is_pooled_by_wall_time():
    """Short windows on an idle machine read 10-15% of a CPU now and then (the kernel's 10 ms
    ticks): pooled by wall time they stay under 10% and the comparison is not flagged; a process
    that took 30% of a CPU through every window is."""
    import pandas as pd

    from analysis.capacity import pooled_contended

    idle = pd.DataFrame({"interference_pct": [12.0, 0.0, 0.0, 14.0, 0.0, 3.0], "wall_s": [0.1] * 6})
    idle["contended"] = idle["interference_pct"] > 10
    assert idle["contended"].any() and not pooled_contended(idle)  # (12 + 14 + 3) / 6 = 4.8%
    busy = idle.assign(interference_pct=[31.0, 28.0, 35.0, 30.0, 26.0, 33.0])
    assert pooled_contended(busy)
    # weighted by wall time: one long contended window outweighs short idle ones
    long = pd.DataFrame({"interference_pct": [40.0, 0.0, 0.0], "wall_s": [1.0, 0.1, 0.1]})
    assert pooled_contended(long)
    assert not pooled_contended(idle.iloc[0:0])
    flags = pd.DataFrame({"contended": [False, True]})  # no interference column: any flag
    assert pooled_contended(flags) and not pooled_contended(flags.iloc[:1])


def test_interference_counts_the_job_by_its_cpu_time_not_its_sampled_series():
    """2 forked processes kept 98% of 2 CPUs busy for 0.06 s and were reaped at the window's end,
    after its last sample: the sampled tree series missed their CPU time (it read 38% of a CPU
    as "other" on an idle machine); the window's own CPU time, taken after the join, has it."""
    import math

    from lab.window import Window, _finish, affinity

    ncpu, n_aff = 2, len(affinity())
    samples = [(0.025, "system", 100.0), (0.025, "tree", 10.0), (0.05, "system", 100.0), (0.05, "tree", 10.0)]
    win = Window(ncpu=ncpu)
    _finish(win, wall_s=0.06, cpu_s=0.06 * ncpu * 0.98, samples=samples, sampler_cpu_s=0.0)
    assert win.interference_pct == pytest.approx(max(0.0, 100.0 * n_aff - 98.0 * ncpu))
    # a stranger that held one CPU: the system read it, the job's CPU time did not
    busy = Window(ncpu=ncpu)
    _finish(busy, wall_s=0.06, cpu_s=0.06 * (ncpu - 1), samples=samples, sampler_cpu_s=0.0)
    assert busy.interference_pct == pytest.approx(max(0.0, 100.0 * n_aff - 100.0 * (ncpu - 1)))
    none = Window(ncpu=ncpu)
    _finish(none, 0.01, 0.01, [], 0.0)
    assert math.isnan(none.interference_pct)  # no sample in the window: no reading


def test_a_named_process_keeps_its_secrets_out_of_the_report():
    """Other processes' command lines go into results/<host>/ and the report, which are meant to
    be shared: secret-looking values are hidden, the option names and everything else stay."""
    from lab.cmdline import redact

    assert redact(["mysql", "-uroot", "-pS3cret", "db"]) == ["mysql", "-uroot", "-p***", "db"]
    assert redact(["curl", "--token", "abc", "--api-key=xyz", "https://x"]) == [
        "curl",
        "--token",
        "***",
        "--api-key=***",
        "https://x",
    ]
    assert redact(["git", "clone", "https://me:ghp_x@github.com/a/b", "psql", "postgresql://u:pw@h/db"]) == [
        "git",
        "clone",
        "https://***@github.com/a/b",
        "psql",
        "postgresql://***@h/db",
    ]
    assert redact(["curl", "-H", "Authorization: Bearer xyz", "-H", "Accept: json"]) == [
        "curl",
        "-H",
        "Authorization: ***",
        "-H",
        "Accept: json",
    ]
    plain = ["gcc", "-pthread", "x.c", "env", "DB_PASSWORD=hunter2", "python", "train.py", "--epochs", "3"]
    assert redact(plain) == [*plain[:4], "DB_PASSWORD=***", *plain[5:]]


def test_the_kernels_scheduler_settings_are_recorded_and_shown_uninterpreted(tmp_path):
    """host.json's ``scheduler``: every readable ``sched_*`` file of the sysctl directory, a guest
    kernel's own among them (``sched_vcpu_pack`` on this project's Firecracker VMs), values as
    read; a file that cannot be read is left out, a directory without any gives ``{}``; the
    report's environment table lists them, and says so for a host.json from before."""
    from lab.hostinfo import scheduler_settings
    from report.build import environment_rows

    (tmp_path / "sched_vcpu_pack").write_text("15\n")
    (tmp_path / "sched_rr_timeslice_ms").write_text("100\n")
    (tmp_path / "sched_domain").mkdir()  # a directory: not a setting that reads
    (tmp_path / "panic").write_text("0\n")
    got = scheduler_settings(tmp_path)
    assert got == {"sched_rr_timeslice_ms": "100", "sched_vcpu_pack": "15"}
    assert scheduler_settings(tmp_path / "none") == {}
    rows = dict(environment_rows({"scheduler": got}))
    assert rows["Kernel scheduler settings (kernel.sched_*)"] == "rr_timeslice_ms=100, vcpu_pack=15"
    assert dict(environment_rows({}))["Kernel scheduler settings (kernel.sched_*)"] == "not recorded"
    assert dict(environment_rows({"scheduler": {}}))["Kernel scheduler settings (kernel.sched_*)"] == "none readable"
