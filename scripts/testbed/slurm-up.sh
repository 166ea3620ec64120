#!/usr/bin/env bash
# A whole SLURM cluster on this machine (Debian slurm-wlm 22.05), plus a key-only sshd login node.
#
#   munged (own key and socket), slurmctld, two slurmd (`slurmd -N node1|node2`, each
#   Gres=gpu:h100:4 on fake char devices, major 195), partitions
#     gpu     Default=YES, never preempted
#     preempt PreemptMode=REQUEUE: jobs here are requeued when an `urgent` job needs their nodes
#     spot    PreemptMode=CANCEL: jobs here are cancelled (state PREEMPTED) when `urgent` needs
#             their nodes; a resubmit is tcl's
#     urgent  higher PriorityTier, preempts `preempt` (PreemptType=preempt/partition_prio)
#   and an sshd "login node" on 127.0.0.1:$LOGIN_PORT in the root network namespace, so it shares
#   this machine's filesystem: that is the cluster's shared filesystem.
#
# Everything lives under $BASE/slurm; nothing in /etc/slurm or /etc/munge is used or touched.
# Clients find the cluster through SLURM_CONF=$BASE/slurm/slurm.conf (set in the login node's
# sessions). Idempotent: whatever an earlier run left (also a crashed one) is stopped first, and
# slurmctld starts with -c (no old jobs; job ids restart at FIRST_JOB_ID).
# The LAST line of stdout is an ssh config file in which the login node is the host `slurm-login`:
#   ssh -F "$(bash scripts/testbed/slurm-up.sh | tail -n1)" slurm-login sinfo
#
#   BASE            (default /tmp/tcl-testbed)
#   LOGIN_PORT      login node's sshd port on 127.0.0.1 (default 2230; the ssh testbed uses 2222)
#   SLURMCTLD_PORT  (default 16817)   SLURMD_PORT  node1's port, node2 gets the next (default 17001)
#   FIRST_JOB_ID    (default 1) two clusters on this machine share one network namespace, and a
#                   multi-node job's coordinator port follows its job id: give each its own range
#   PYTHON          the interpreter the login node offers as python3 (default: the base
#                   interpreter of `python3`, a virtualenv's resolved to the one it was made from)
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
BASE=${BASE:-/tmp/tcl-testbed}; S=$BASE/slurm
LOGIN_PORT=${LOGIN_PORT:-2230}
CTLD_PORT=${SLURMCTLD_PORT:-16817}
NODE_PORT=${SLURMD_PORT:-17001}
FIRST_JOB_ID=${FIRST_JOB_ID:-1}
NODES=(node1 node2)
GPUS_PER_NODE=4
HERE=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s.%N)

BASE=$BASE bash "$HERE/slurm-down.sh" >/dev/null   # leftovers of an earlier (maybe crashed) run

for port in "$LOGIN_PORT" "$CTLD_PORT" $(seq "$NODE_PORT" $((NODE_PORT + ${#NODES[@]} - 1))); do
  if ss -Htln "sport = :$port" | grep -q .; then
    echo "slurm-up: port $port is taken by another process:" >&2; ss -Htlnp "sport = :$port" >&2; exit 1
  fi
done

mkdir -p "$S"/{state,log,dev,run,bin,login,jobs} /run/sshd
for n in "${NODES[@]}"; do mkdir -p "$S/spool-$n"; done
rm -rf "$S/state"/* "$S"/spool-*/*

# Fake GPUs: slurmd wants character devices (plain files: "not a valid character or block
# device"); 195 is the NVIDIA major. Every node uses the same four, as nvidia0..3.
for i in $(seq 0 $((GPUS_PER_NODE - 1))); do
  [ -c "$S/dev/nvidia$i" ] || { rm -f "$S/dev/nvidia$i"; mknod "$S/dev/nvidia$i" c 195 "$i"; }
done

# munge: our own daemon, key and socket (slurm.conf's AuthInfo points at the socket), so a
# system munged, if any, is neither needed nor disturbed.
M=$S/munge
mkdir -p "$M"
[ -s "$M/munge.key" ] || head -c 1024 /dev/urandom >"$M/munge.key"
chown -R munge:munge "$M"; chmod 0400 "$M/munge.key"
chmod 0755 "$M"   # munged: the socket's directory must be searchable by all
runuser -u munge -- /usr/sbin/munged --key-file="$M/munge.key" --socket="$M/munge.sock" \
  --pid-file="$M/munged.pid" --log-file="$M/munged.log" --seed-file="$M/munged.seed"
for _ in $(seq 100); do munge -S "$M/munge.sock" -n >/dev/null 2>&1 && break; sleep 0.05; done
munge -S "$M/munge.sock" -n >/dev/null

HOST=$(hostname -s)
cat >"$S/slurm.conf" <<CONF
# Written by scripts/testbed/slurm-up.sh; every path absolute (the daemons chdir after forking).
ClusterName=tcltest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$M/munge.sock
StateSaveLocation=$S/state
FirstJobId=$FIRST_JOB_ID
SlurmdSpoolDir=$S/spool-%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# every node claims 8 cores / 8000 MB whatever this machine has
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
CommunicationParameters=NoInAddrAny
SchedulerType=sched/backfill
# the default batch_sched_delay=3 makes sbatch -> running ~3 s; 0 gives ~1 s
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
# finished jobs stay visible to squeue / scontrol show job for 5 minutes (no accounting here)
MinJobAge=300
KillWait=2
InactiveLimit=0
JobRequeue=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=DEFAULT CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=8000 Gres=gpu:h100:$GPUS_PER_NODE State=UNKNOWN
CONF
i=0
for n in "${NODES[@]}"; do
  echo "NodeName=$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((NODE_PORT + i))" >>"$S/slurm.conf"
  i=$((i + 1))
done
cat >>"$S/slurm.conf" <<CONF
PartitionName=gpu     Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1  PreemptMode=OFF
PartitionName=preempt Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1  PreemptMode=REQUEUE
PartitionName=spot    Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1  PreemptMode=CANCEL
PartitionName=urgent  Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
cat >"$S/gres.conf" <<CONF
AutoDetect=off
Name=gpu Type=h100 File=$S/dev/nvidia[0-$((GPUS_PER_NODE - 1))]
CONF
export SLURM_CONF=$S/slurm.conf

/usr/sbin/slurmctld -f "$SLURM_CONF" -c          # -c: clear old job and node state
for n in "${NODES[@]}"; do /usr/sbin/slurmd -f "$SLURM_CONF" -N "$n"; done

# The login node's environment. sshd resets PATH for sessions; SetEnv (below) overrides that.
# python3/python/uv are links to the real files, so no shim or virtualenv is needed there.
PY=${PYTHON:-$(python3 -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))')}
resolve_uv() {
  local c
  for c in "${UV:-}" "$(command -v uv || true)"; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    c=$(readlink -f "$c")
    if [ "$(head -c 4 "$c" | od -An -c | tr -d ' ')" = '177ELF' ]; then echo "$c"; return; fi
  done
  command -v pyenv >/dev/null 2>&1 && c=$(pyenv which uv 2>/dev/null) && { readlink -f "$c"; return; }
  "$PY" -c 'import uv; print(uv.find_uv_bin())' 2>/dev/null && return
  echo "slurm-up: no uv binary found" >&2; return 1
}
UVBIN=$(resolve_uv)
ln -sfn "$PY" "$S/bin/python3"; ln -sfn "$PY" "$S/bin/python"; ln -sfn "$UVBIN" "$S/bin/uv"
LOGIN_PATH=$S/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

L=$S/login
[ -f "$L/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C tcl-slurm-test -f "$L/id_ed25519"
[ -f "$L/hostkey" ] || ssh-keygen -q -t ed25519 -N '' -f "$L/hostkey"
cp "$L/id_ed25519.pub" "$L/authorized_keys"; chmod 600 "$L/authorized_keys"
cat >"$L/sshd.conf" <<CONF
Port $LOGIN_PORT
ListenAddress 127.0.0.1
HostKey $L/hostkey
PidFile $L/sshd.pid
AuthorizedKeysFile $L/authorized_keys
AuthenticationMethods publickey
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
AllowTcpForwarding yes
X11Forwarding no
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel VERBOSE
# PYENV_REHASH_TIMEOUT: see ssh-up.sh (a stale pyenv rehash lock costs 1 s, not 60)
SetEnv PATH=$LOGIN_PATH SLURM_CONF=$SLURM_CONF PYENV_REHASH_TIMEOUT=1
CONF
/usr/sbin/sshd -t -f "$L/sshd.conf"
/usr/sbin/sshd -f "$L/sshd.conf" -E "$L/sshd.log"      # daemonizes; pid in $L/sshd.pid
echo "[127.0.0.1]:$LOGIN_PORT $(cut -d' ' -f1,2 "$L/hostkey.pub")" >"$L/known_hosts"
cat >"$S/ssh_config" <<CONF
Host slurm-login
  HostName 127.0.0.1
  Port $LOGIN_PORT
  User root
  IdentityFile $L/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $L/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
CONF

ok=
for _ in $(seq 200); do
  if [ "$(sinfo -h -N -t idle -p gpu -o %N 2>/dev/null | sort -u | wc -l)" = "${#NODES[@]}" ] &&
     ssh -F "$S/ssh_config" slurm-login true 2>/dev/null; then ok=1; break; fi
  sleep 0.1
done
if [ -z "$ok" ]; then
  echo "slurm-up: cluster not ready" >&2
  sinfo -N -o '%N %P %T %G %E' >&2 || true
  tail -n 20 "$S/log/slurmctld.log" "$S"/log/slurmd-*.log "$L/sshd.log" >&2 || true
  exit 1
fi
sinfo -N -o '%N %P %T %G'
awk -v a="$t0" -v b="$(date +%s.%N)" -v c="$S/ssh_config" 'BEGIN{printf "up in %.2f s; login: ssh -F %s slurm-login\n", b-a, c}'
echo "$S/ssh_config"
