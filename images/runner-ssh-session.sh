#!/bin/sh
# sshd ForceCommand in the runner image: run the session in the job's working dir with the job's
# environment (written by tcl-runner when the job starts; never contains secrets), then the
# command the client asked for, or a login shell.
env_file=/run/tcl-runner/job-env.sh
# shellcheck disable=SC1090
[ -r "$env_file" ] && . "$env_file"
shell=/bin/bash
[ -x "$shell" ] || shell=/bin/sh
if [ -n "${SSH_ORIGINAL_COMMAND:-}" ]; then
  exec "$shell" -c "$SSH_ORIGINAL_COMMAND"
fi
exec "$shell" -l
