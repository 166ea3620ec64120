#!/usr/bin/env bash
# Installs every system package and tool the tests and benchmarks need (idempotent).
# Debian bookworm, root. Nothing here is downloaded outside Debian's packages and PyPI.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "$1" ]; }
{ have dockerd && have /usr/bin/docker; } || need+=(docker.io)   # Debian's client: BuildKit works
have debootstrap || need+=(debootstrap)
have /usr/sbin/sshd || need+=(openssh-server)
have ssh || need+=(openssh-client)
have ip || need+=(iproute2)
have iptables || need+=(iptables)
have curl || need+=(curl)
have /usr/lib/postgresql/15/bin/initdb || need+=(postgresql-15)
{ have /usr/sbin/slurmctld && have /usr/sbin/slurmd && have sbatch; } || need+=(slurm-wlm)
have /usr/sbin/munged || need+=(munge)
have ch-run || need+=(charliecloud-runtime)
have redis-server || need+=(redis-server)   # JuiceFS's metadata engine (scripts/testbed/juicefs-up.sh)
if [ "${#need[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# sshd must not run as a system service here: tests start their own instances.
bash "$(dirname "$0")/../uv.sh" >/dev/null  # uv for this user (no pip into Debian's Python)
echo "testbed packages ok"
