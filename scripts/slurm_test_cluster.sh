#!/usr/bin/env bash
# A one-node Slurm cluster on 127.0.0.1 for klineage's tests (docs/cluster.md, "Testing"):
# munged, slurmctld and slurmd started directly (no systemd), everything under one folder.
#
#   scripts/slurm_test_cluster.sh start DIR   install slurm-wlm and munge when missing (root, apt),
#                                              start the daemons, wait until the node is idle;
#                                              DIR/env then holds `export SLURM_CONF=…`
#   scripts/slurm_test_cluster.sh stop DIR    stop the daemons it started (by their pid files)
#
# The node offers 8 CPUs whatever the machine has (SlurmdParameters=config_overrides), so the
# stand-in judge's light workers run 8 at a time; no GPU (no gres): the tests use the stand-in.
set -u
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

stop() {
  for d in slurmd slurmctld munged; do
    if [ -f "$dir/$d.pid" ]; then
      pid=$(cat "$dir/$d.pid")
      kill "$pid" 2>/dev/null
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null
      rm -f "$dir/$d.pid"
    fi
  done
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

need=()
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "slurm_test_cluster: ${need[*]} missing and not root: apt-get install ${need[*]}" >&2
    exit 1
  fi
  echo "slurm_test_cluster: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq "${need[@]}" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1
    apt-get install -y -qq "${need[@]}" >/dev/null || { echo "slurm_test_cluster: apt-get could not install ${need[*]}" >&2; exit 1; }
  fi
fi

mkdir -p "$dir/state" "$dir/slurmd" || exit 1
dir=$(cd "$dir" && pwd)
# munge: a key of our own, a socket of our own
mungekey -c -f -k "$dir/munge.key" >/dev/null 2>&1 || dd if=/dev/urandom of="$dir/munge.key" bs=1 count=128 2>/dev/null
chmod 600 "$dir/munge.key"
munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" --log-file="$dir/munged.log" \
  --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" || { echo "slurm_test_cluster: munged did not start: $(tail -3 "$dir/munged.log")" >&2; exit 1; }

# two free ports
port=$((17000 + ($$ % 1500) * 2))
while ss -ltn 2>/dev/null | grep -qE ":($port|$((port + 1)))\b"; do port=$((port + 2)); done
cat > "$dir/slurm.conf" <<EOF
ClusterName=kltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket=$dir/munge.sock,cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=300
MessageTimeout=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"
echo "export SLURM_CONF='$dir/slurm.conf'" > "$dir/env"
slurmctld -f "$dir/slurm.conf" || { echo "slurm_test_cluster: slurmctld did not start: $(tail -3 "$dir/slurmctld.log")" >&2; stop; exit 1; }
slurmd -f "$dir/slurm.conf" -N localhost || { echo "slurm_test_cluster: slurmd did not start: $(tail -3 "$dir/slurmd.log")" >&2; stop; exit 1; }
for _ in $(seq 100); do
  if sinfo -h -o %T 2>/dev/null | grep -q idle; then exit 0; fi
  sleep 0.2
done
echo "slurm_test_cluster: the node did not become idle: $(sinfo 2>&1 | tail -2); $(tail -3 "$dir/slurmctld.log")" >&2
stop
exit 1
