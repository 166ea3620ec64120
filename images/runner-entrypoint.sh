#!/bin/sh
# Container entrypoint: authorize the given public keys, start sshd (10022, key-only), exec the runner.
#   TCL_SSH_AUTHORIZED_KEYS  newline-separated public keys (public, not secret)
#   TCL_SSH_PORT             sshd port (default 10022)
#   TCL_SSH_LISTEN           sshd listen address (default 0.0.0.0: in bridge mode docker publishes
#                            the port on the host's 127.0.0.1 only; on the host network the shim
#                            sets 127.0.0.1 so nothing listens beyond loopback)
# Every ssh session goes through tcl-ssh-session, which starts it in the job's working dir with
# the job's environment (secrets excepted) from the file the runner writes when the job starts.
set -eu
port="${TCL_SSH_PORT:-10022}"
export TCL_RUNNER_SSH_ENV_FILE=/run/tcl-runner/job-env.sh
# The job runs with the image's own python (tcl's venv is not on PATH). A `job` spec (tcl.jobs)
# gets this directory, which holds only the `tcl` package, on its PYTHONPATH; the image provides
# JAX and the rest (docs/runner.md, Image).
export TCL_RUNNER_JOB_TCL_PATH=/src/tcl
mkdir -p /run/tcl-runner
if [ -n "${TCL_SSH_AUTHORIZED_KEYS:-}" ] && [ -x /usr/sbin/sshd ]; then
  mkdir -p /root/.ssh /run/sshd && chmod 700 /root/.ssh
  printf '%s\n' "$TCL_SSH_AUTHORIZED_KEYS" > /root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
  [ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
  # Login shells read /etc/profile.d too (after /etc/profile has reset PATH and friends).
  ln -sf "$TCL_RUNNER_SSH_ENV_FILE" /etc/profile.d/zz-tcl-job.sh
  /usr/sbin/sshd -p "$port" -o ListenAddress="${TCL_SSH_LISTEN:-0.0.0.0}" -h /etc/ssh/ssh_host_ed25519_key -E /var/log/tcl-sshd.log \
    -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no \
    -o PermitRootLogin=prohibit-password -o AuthenticationMethods=publickey \
    -o UsePAM=no -o PermitUserEnvironment=no -o AllowTcpForwarding=yes \
    -o ForceCommand=/usr/local/bin/tcl-ssh-session -o PidFile=/run/sshd.pid
fi
unset TCL_SSH_AUTHORIZED_KEYS
# By absolute path: the venv stays off PATH, so nothing of it reaches the job's environment.
exec /opt/tcl/bin/tcl-runner "$@"
