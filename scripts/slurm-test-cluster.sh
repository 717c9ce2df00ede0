#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, from Debian's packages, for tests/test_slurm.py.
#
#   scripts/slurm-test-cluster.sh up      # install if missing, configure, start munged, slurmctld, slurmd
#   scripts/slurm-test-cluster.sh down    # stop every daemon it started, remove its state
#
# Needs root and apt (Debian 12: Slurm 22.05). Everything it writes lives in $LAB_SLURM_DIR
# (default /tmp/cpulab-slurm), except /etc/slurm/slurm.conf: the jobstep executor strips every
# SLURM_* variable, SLURM_CONF included, before its inner srun, so the configuration must be at
# SLURM's default place. An existing /etc/slurm/slurm.conf is kept aside and put back by `down`.
#
# The node is this machine with its CPUs and the node feature `cpulab` (for --constraint); two
# partitions select it: `debug` (default) and `onecpu`.
# There is no accounting daemon: give Snakemake `--slurm-status-command squeue` (its default,
# sacct, loses the jobs). TaskPlugin=task/affinity binds each task to the CPUs it asked for, so
# a job of 1 CPU on a 2-CPU node sees one CPU in its affinity, as a confined cluster job does.
set -euo pipefail

dir="${LAB_SLURM_DIR:-/tmp/cpulab-slurm}"
conf=/etc/slurm/slurm.conf
host="$(hostname -s)"

stop_all() {
    for daemon in slurmd slurmctld munged; do
        pkill -x "$daemon" 2>/dev/null || true
    done
    for _ in $(seq 50); do
        running=""
        for daemon in slurmd slurmctld munged; do
            if pgrep -x "$daemon" >/dev/null; then running="$running $daemon"; fi
        done
        [ -n "$running" ] || return 0
        sleep 0.1
    done
    for daemon in $running; do pkill -9 -x "$daemon" 2>/dev/null || true; done
}

case "${1:-}" in
up)
    if [ "$(id -u)" != 0 ]; then echo "slurm-test-cluster: needs root" >&2; exit 2; fi
    if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
        command -v apt-get >/dev/null || { echo "slurm-test-cluster: no apt-get to install SLURM" >&2; exit 2; }
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            slurmctld slurmd slurm-client munge >/dev/null
    fi
    stop_all  # the packages' own services, if their postinst started them
    rm -rf "$dir"
    mkdir -p "$dir"/{state,spool,log,run} /etc/slurm /etc/munge /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge  # munge insists on its socket directory's mode
    [ -s /etc/munge/munge.key ] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chmod 0400 /etc/munge/munge.key
    munged --force
    cpus=$(nproc)
    free_mb=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
    mem=$(( free_mb * 8 / 10 ))
    if [ -e "$conf" ] && [ ! -e "$dir/slurm.conf.saved" ]; then cp -p "$conf" "$dir/slurm.conf.saved"; fi
    cat >"$conf" <<EOF
# Written by cpu-lab scripts/slurm-test-cluster.sh; removed by its 'down'.
ClusterName=cpulab
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
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
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem Features=cpulab State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=onecpu Nodes=$host MaxTime=INFINITE State=UP
EOF
    echo "$conf" >"$dir/written"
    slurmctld
    slurmd
    for _ in $(seq 100); do
        if sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle'; then
            sinfo
            exit 0
        fi
        sleep 0.2
    done
    echo "slurm-test-cluster: the node did not come up; logs in $dir/log" >&2
    cat "$dir"/log/*.log >&2 || true
    exit 1
    ;;
down)
    stop_all
    if [ -e "$dir/written" ]; then
        if [ -e "$dir/slurm.conf.saved" ]; then mv -f "$dir/slurm.conf.saved" "$conf"; else rm -f "$conf"; fi
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
