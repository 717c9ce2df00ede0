#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, from Debian's packages, for tests/test_slurm.py.
#
#   scripts/slurm-test-cluster.sh up       # configure and start munged, slurmctld, slurmd (root)
#   scripts/slurm-test-cluster.sh down     # stop what `up` started, put slurm.conf back, remove its state
#   scripts/slurm-test-cluster.sh status   # what a previous `up` left here, one line per item
#
# What it touches outside $LAB_SLURM_DIR (default /tmp/cpulab-slurm, its own directory):
#   * /etc/slurm/slurm.conf: the jobstep executor strips every SLURM_* variable, SLURM_CONF
#     included, before its inner srun, so the configuration must be at SLURM's default place. An
#     existing one is kept aside first ($dir/slurm.conf.saved, with its path in $dir/written) and
#     put back by `down`, also by a `down` run by hand after a crash, and by the next `up`.
#   * Debian's packages slurmctld slurmd slurm-client munge, installed by apt only when missing
#     and only with LAB_SLURM_INSTALL=1 (tests/test_slurm.py sets it when asked to run).
# munged runs with its key, socket, pid, log and seed files in $dir (slurm.conf's AuthInfo names
# the socket), so /etc/munge, /run/munge and /var/lib/munge are not touched.
#
# Stop only what you started: every daemon writes its pid file into $dir/run, and `down` stops
# exactly those pids (after checking each is still that daemon), never a daemon by name. `up`
# refuses, with one line, when a slurmctld, slurmd or munged it did not start is running: the
# machine is then a SLURM node of someone else's, and this script is not for it. A crash between
# `up` and `down` (the test killed, a power cut) leaves $dir behind; `down`, or the next `up`,
# stops the daemons its pid files name and restores slurm.conf before anything else.
#
# The node is this machine with its CPUs and the node feature `cpulab` (for --constraint); two
# partitions select it: `debug` (default) and `onecpu`.
# There is no accounting daemon: give Snakemake `--slurm-status-command squeue` (its default,
# sacct, loses the jobs). TaskPlugin=task/affinity binds each task to the CPUs it asked for, so
# a job of 1 CPU on a 2-CPU node sees one CPU in its affinity, as a confined cluster job does.
set -euo pipefail

dir="${LAB_SLURM_DIR:-/tmp/cpulab-slurm}"
conf="${LAB_SLURM_CONF:-/etc/slurm/slurm.conf}" # another path only for the script's own tests
marker="# Written by cpu-lab scripts/slurm-test-cluster.sh"
daemons=(slurmd slurmctld munged)

say() { echo "slurm-test-cluster: $*" >&2; }

# Whether a pid runs: a zombie (exited, until its parent reaps it) does not.
alive() { [ -e "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# The pid a pid file of ours names, if that process is still the daemon it names.
our_pid() {
    local daemon=$1 file="$dir/run/$1.pid" pid
    [ -s "$file" ] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$daemon" ] && echo "$pid"
}

# Daemons of SLURM or munge running now that this script's pid files do not name: "name (pid N)".
# A zombie does not count: a daemon's first process, exited, until its new parent reaps it.
foreign() {
    local daemon pid mine out=()
    for daemon in "${daemons[@]}"; do
        mine=$(our_pid "$daemon" || true)
        for pid in $(pgrep -x "$daemon" || true); do
            alive "$pid" || continue
            [ "$pid" = "$mine" ] || out+=("$daemon (pid $pid)")
        done
    done
    echo "${out[*]:-}"
}

# Stop the daemons our pid files name (TERM, then KILL after 5 s); nothing else.
# Wait up to 5 s for process $1 to be gone.
wait_gone() {
    for _ in $(seq 50); do
        alive "$1" || return 0
        sleep 0.1
    done
}

stop_ours() {
    local daemon pid
    for daemon in "${daemons[@]}"; do
        pid=$(our_pid "$daemon" || true)
        [ -n "$pid" ] || continue
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid"
        if alive "$pid"; then
            kill -9 "$pid" 2>/dev/null || true
            # a killed process lives on until the kernel has torn it down: `up` checks next that
            # no daemon but its own runs, and one still dying would read as a foreign SLURM
            wait_gone "$pid"
        fi
        rm -f "$dir/run/$daemon.pid"
    done
}

# Put back the slurm.conf that `up` kept aside (or remove the one it wrote where there was none).
restore_conf() {
    [ -e "$dir/written" ] || return 0
    local path
    path=$(cat "$dir/written")
    if [ -e "$dir/slurm.conf.saved" ]; then
        cp -p "$dir/slurm.conf.saved" "$path"
        rm -f "$dir/slurm.conf.saved"
    elif [ -e "$path" ]; then
        case "$(head -n1 "$path")" in "$marker"*) rm -f "$path" ;; esac # ours: there was none before
    fi
    rm -f "$dir/written"
}

# Undo what a previous `up` left, crashed or not: its daemons, then slurm.conf, then $dir (only
# a directory that `up` made: it holds the file .cpulab-slurm).
clean() {
    [ -d "$dir" ] || return 0
    if [ ! -e "$dir/.cpulab-slurm" ]; then
        if [ -z "$(ls -A "$dir")" ]; then rmdir "$dir"; return 0; fi
        say "LAB_SLURM_DIR=$dir exists and was not made by this script (no .cpulab-slurm in it): left alone; choose a new directory"
        exit 2
    fi
    cancel_jobs
    stop_ours
    restore_conf
    rm -rf "$dir"
}

# Cancel this user's jobs on our cluster while its daemons still run, and wait up to 10 s for
# them to be gone: a job step's processes (slurmstepd and what it runs) belong to no daemon's
# pid, so stopping the daemons alone leaves them running (a test run interrupted mid-job).
cancel_jobs() {
    our_pid slurmctld >/dev/null || return 0
    command -v scancel >/dev/null || return 0
    local user
    user=$(id -un)
    scancel --quiet --user "$user" 2>/dev/null || true
    for _ in $(seq 100); do
        [ -z "$(squeue --noheader --user "$user" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    say "jobs still listed 10 s after scancel: $(squeue --noheader --user "$user" 2>/dev/null | tr '\n' ';')"
}

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return 0
    if [ "${LAB_SLURM_INSTALL:-}" != 1 ]; then
        say "SLURM is not installed; LAB_SLURM_INSTALL=1 lets this script install Debian's slurmctld slurmd slurm-client munge"
        exit 2
    fi
    command -v apt-get >/dev/null || { say "no apt-get to install SLURM"; exit 2; }
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
    # a package's postinst may start its service: this script's doing, so stopped by its pid
    local daemon pid
    for daemon in "${daemons[@]}"; do
        for pid in $(pgrep -x "$daemon" || true); do kill "$pid" 2>/dev/null || true; done
    done
    sleep 1
}

write_conf() {
    local host cpus mem
    host="$(hostname -s)"
    cpus=$(nproc)
    mem=$(awk '/MemAvailable/ {print int($2 / 1024 * 8 / 10)}' /proc/meminfo)
    mkdir -p "$(dirname "$conf")"
    if [ -e "$conf" ]; then cp -p "$conf" "$dir/slurm.conf.saved"; fi
    echo "$conf" >"$dir/written"
    cat >"$conf" <<EOF
$marker; put back by its 'down' ($dir).
ClusterName=cpulab
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=2
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem Features=cpulab State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=onecpu Nodes=$host MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    mkdir -p "$dir/munge"
    chmod 0700 "$dir/munge"
    dd if=/dev/urandom bs=1 count=1024 of="$dir/munge/munge.key" status=none
    chmod 0400 "$dir/munge/munge.key"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket.2" \
        --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
}

case "${1:-}" in
up)
    others=$(foreign)
    if [ -n "$others" ]; then
        say "refusing: $others already running and this script did not start it; not for a machine that runs SLURM or munge of its own"
        exit 3
    fi
    if [ "$(id -u)" != 0 ]; then say "needs root"; exit 2; fi
    clean # what a crashed run left: its daemons stopped, slurm.conf put back
    install_packages
    # No foreign daemon ran before `clean`, so one seen now that our pid files do not name is
    # most likely ours on its way out (CI once saw a slurmd here, right after the stop; which
    # process it was is not known). A foreign SLURM does not go away: refused after 5 s.
    for _ in $(seq 50); do
        others=$(foreign)
        [ -n "$others" ] || break
        sleep 0.1
    done
    if [ -n "$others" ]; then say "refusing: $others still running after the install"; exit 3; fi
    mkdir -p -m 0700 "$dir"
    echo "made by scripts/slurm-test-cluster.sh up; removed by its down" >"$dir/.cpulab-slurm"
    mkdir -p "$dir"/{state,spool,log,run}
    write_conf
    start_munge
    SLURM_CONF="$conf" slurmctld
    SLURM_CONF="$conf" slurmd
    for _ in $(seq 100); do
        if SLURM_CONF="$conf" sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle'; then
            SLURM_CONF="$conf" sinfo
            exit 0
        fi
        sleep 0.2
    done
    say "the node did not come up; logs in $dir/log"
    cat "$dir"/log/*.log >&2 || true
    exit 1
    ;;
down)
    clean
    ;;
status)
    for daemon in "${daemons[@]}"; do
        pid=$(our_pid "$daemon" || true)
        [ -z "$pid" ] || echo "running: $daemon (pid $pid)"
    done
    [ ! -e "$dir/written" ] || echo "written: $(cat "$dir/written")"
    [ ! -e "$dir/slurm.conf.saved" ] || echo "kept aside: $dir/slurm.conf.saved"
    others=$(foreign)
    [ -z "$others" ] || echo "not ours: $others"
    ;;
*)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
