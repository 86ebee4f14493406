#!/usr/bin/env bash
# A throwaway Slurm cluster on this machine, for tests and for trying a Slurm
# pool by hand: munged, slurmctld and one slurmd per node, all as root, from a
# slurm.conf written into DIR. Each node declares GPUs as GRES whose device
# files are character devices made with mknod (Slurm wants real device files;
# nothing opens them: the ranks use gpufleet's simulated GPUs).
#   eval "$(bash .ci/slurm.sh start /tmp/gpufleet-slurm)"   # prints export SLURM_CONF=...
#   bash .ci/slurm.sh stop /tmp/gpufleet-slurm
# Settings (environment): SLURM_SIM_NODES (default 1), SLURM_SIM_GPUS per node
# (default 2), SLURM_SIM_PARTITION (default gpu), SLURM_SIM_PORT (first of
# nodes+1 free TCP ports; default: picked).
set -euo pipefail
cmd=${1:-start}
dir=${2:-/tmp/gpufleet-slurm}
nodes=${SLURM_SIM_NODES:-1}
gpus=${SLURM_SIM_GPUS:-2}
partition=${SLURM_SIM_PARTITION:-gpu}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  [ -n "$pid" ] && [ "$pid" -gt 1 ] && kill -0 "$pid" 2>/dev/null
}

stop_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

write_conf() {
  local ctl_port=$1 nodelist="sim[1-$nodes]"
  [ "$nodes" = 1 ] && nodelist=sim1
  cat >"$dir/slurm.conf" <<EOF
ClusterName=gpufleet-sim
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctl_port
# Job ids from the controller's (free, so per-cluster) port: two test clusters on one machine (one per test
# shard) number their jobs apart, so the rendezvous port a job over several nodes derives from its id
# (gpufleet.pools.node) is not one another cluster's job takes at the same time.
FirstJobId=$ctl_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
EOF
  : >"$dir/gres.conf"
  local i port
  for i in $(seq "$nodes"); do
    port=$(free_port)
    echo "NodeName=sim$i NodeAddr=127.0.0.1 NodeHostname=localhost Port=$port CPUs=4 RealMemory=8000 Gres=gpu:$gpus State=UNKNOWN" >>"$dir/slurm.conf"
    echo "NodeName=sim$i Name=gpu File=/dev/gpufleet-sim-n$i-nvidia[0-$((gpus - 1))]" >>"$dir/gres.conf"
    local g
    for g in $(seq 0 $((gpus - 1))); do
      [ -e "/dev/gpufleet-sim-n$i-nvidia$g" ] || mknod -m 666 "/dev/gpufleet-sim-n$i-nvidia$g" c 195 "$(((i - 1) * gpus + g))"
    done
  done
  echo "PartitionName=$partition Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
}

start_slurmd() {
  # SLURM_SIM_SHADOW=FOLDER:CHILD: jobs must run an interpreter under FOLDER, which other accounts may
  # not enter (pyenv under /root). slurmd then runs in a mount namespace of its own where FOLDER is a
  # copy of mode 0711 holding only CHILD, so a job as any account reaches the interpreter and nothing
  # else of FOLDER; nothing outside slurmd and its jobs changes.
  if [ -n "${SLURM_SIM_SHADOW:-}" ]; then
    local folder=${SLURM_SIM_SHADOW%%:*} child=${SLURM_SIM_SHADOW#*:} shadow=$dir/shadow
    mkdir -p "$shadow/$(basename "$child")"
    chmod 711 "$shadow"
    unshare --mount --propagation private sh -c 'mount --bind "$1" "$2" && mount --rbind "$3" "$4" && exec slurmd -N "$5"' \
      sh "$child" "$shadow/$(basename "$child")" "$shadow" "$folder" "$1"
  else
    slurmd -N "$1"
  fi
}

start_munge() {
  mkdir -p "$dir/munge"
  chmod 755 "$dir/munge"
  [ -f "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null; chmod 400 "$dir/munge/munge.key"; }
  if ! alive "$dir/munge/munged.pid"; then
    munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
  fi
}

wait_idle() {
  local want=$1 n
  for _ in $(seq 150); do
    n=$(timeout 5 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l || true)
    [ "$n" -ge "$want" ] && return 0
    sleep 0.2
  done
  echo "slurm: the nodes did not become idle; see $dir/*.log" >&2
  sinfo -N >&2 || true
  return 1
}

case "$cmd" in
start)
  mkdir -p "$dir/state" "$dir/spool"
  chmod 755 "$dir"
  [ -f "$dir/slurm.conf" ] || write_conf "${SLURM_SIM_PORT:-$(free_port)}"
  export SLURM_CONF=$dir/slurm.conf
  start_munge
  alive "$dir/slurmctld.pid" || slurmctld -c -i
  for i in $(seq "$nodes"); do
    alive "$dir/slurmd-sim$i.pid" || start_slurmd "sim$i"
  done
  wait_idle "$nodes"
  echo "export SLURM_CONF=$dir/slurm.conf"
  ;;
restart-ctld)
  # slurmctld alone, keeping its saved state (the jobs it knew).
  export SLURM_CONF=$dir/slurm.conf
  stop_pidfile "$dir/slurmctld.pid"
  slurmctld
  for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
  ;;
stop)
  export SLURM_CONF=$dir/slurm.conf
  for f in "$dir"/slurmd-*.pid; do stop_pidfile "$f"; done
  stop_pidfile "$dir/slurmctld.pid"
  stop_pidfile "$dir/munge/munged.pid"
  ;;
*) echo "usage: $0 start|restart-ctld|stop [dir]" >&2; exit 2 ;;
esac
