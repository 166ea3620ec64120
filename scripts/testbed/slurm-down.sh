#!/usr/bin/env bash
# Stops what slurm-up.sh started under $BASE/slurm: the jobs, slurmctld, the slurmd, the login
# sshd and munged (last: a slurmctld whose munged is gone ignores SIGTERM). Safe to run twice, or
# when nothing runs. Only processes named in our own pid files (or, for slurmstepd left by a
# crashed run, carrying our SLURM_CONF) are signalled.
BASE=${BASE:-/tmp/tcl-testbed}; S=$BASE/slurm
export SLURM_CONF=$S/slurm.conf PATH=$PATH:/usr/sbin:/sbin

# pid from FILE if that process runs and is called NAME (zombies, reaped lazily here, do not count)
pid_of() {
  local file=$1 name=$2 pid
  [ -f "$file" ] || return 1
  pid=$(head -n1 "$file" 2>/dev/null | tr -dc 0-9)
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}
# stop: TERM, wait up to 5 s, then KILL
stop() {
  local file=$1 name=$2 pid
  pid=$(pid_of "$file" "$name") || { rm -f "$file"; return 0; }
  kill "$pid" 2>/dev/null
  for _ in $(seq 50); do pid_of "$file" "$name" >/dev/null || break; sleep 0.1; done
  pid_of "$file" "$name" >/dev/null && kill -9 "$pid" 2>/dev/null
  rm -f "$file"
}

if pid_of "$S/run/slurmctld.pid" slurmctld >/dev/null && [ -f "$SLURM_CONF" ]; then
  # cancel every job, let them end (KillWait=2), then stop slurmctld and every slurmd
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 80); do
      [ -z "$(timeout 10 squeue -h -t running,completing,suspended -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  timeout 10 scontrol shutdown >/dev/null 2>&1
  for _ in $(seq 50); do
    pid_of "$S/run/slurmctld.pid" slurmctld >/dev/null || break
    sleep 0.1
  done
fi
for f in "$S"/run/slurmd-*.pid; do stop "$f" slurmd; done
stop "$S/run/slurmctld.pid" slurmctld
# job steps of a crashed run outlive their slurmd: find them, and their tasks, by the SLURM_CONF
# they inherited (the tasks also carry SLURM_JOB_ID)
for d in /proc/[0-9]*; do
  env=$(tr '\0' '\n' 2>/dev/null <"$d/environ") || continue
  grep -qxF "SLURM_CONF=$SLURM_CONF" <<<"$env" || continue
  if [ "$(cat "$d/comm" 2>/dev/null)" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<<"$env"; then
    kill -9 "${d#/proc/}" 2>/dev/null
  fi
done
stop "$S/login/sshd.pid" sshd
stop "$S/munge/munged.pid" munged
true
