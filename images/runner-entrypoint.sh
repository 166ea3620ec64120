#!/bin/sh
# Container entrypoint: authorize the given public keys, start sshd (10022, key-only), exec the runner.
#   TCL_SSH_AUTHORIZED_KEYS  newline-separated public keys (public, not secret)
#   TCL_SSH_PORT             sshd port (default 10022)
set -eu
port="${TCL_SSH_PORT:-10022}"
if [ -n "${TCL_SSH_AUTHORIZED_KEYS:-}" ] && [ -x /usr/sbin/sshd ]; then
  mkdir -p /root/.ssh /run/sshd && chmod 700 /root/.ssh
  printf '%s\n' "$TCL_SSH_AUTHORIZED_KEYS" > /root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
  [ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
  /usr/sbin/sshd -p "$port" -h /etc/ssh/ssh_host_ed25519_key \
    -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no \
    -o PermitRootLogin=prohibit-password -o AuthenticationMethods=publickey \
    -o UsePAM=no -o PermitUserEnvironment=no -o AllowTcpForwarding=yes
fi
unset TCL_SSH_AUTHORIZED_KEYS
exec tcl-runner "$@"
