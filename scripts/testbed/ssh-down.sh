#!/bin/bash
BASE=${BASE:-/tmp/tcl-testbed}; D=$BASE/ssh; BR=br-infra
for p in $D/sshd_*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; rm -f "$p"; done
for ns in $(ip netns list | awk '/^infra-h/{print $1}'); do
  ip netns pids $ns | xargs -r kill
  # a netns (and its veth) lives on while a process is in it: wait for them, then SIGKILL
  for _ in $(seq 50); do [ -z "$(ip netns pids $ns)" ] && break; sleep 0.1; done
  ip netns pids $ns | xargs -r kill -9
  ip netns del $ns; rm -rf /etc/netns/$ns
done
iptables -D FORWARD -i $BR -o $BR -j ACCEPT 2>/dev/null
ip link del $BR 2>/dev/null   # also removes the root-side veths
rm -rf "$BASE/vm"            # the hosts' private /var/lib/tcl-shim (their mounts died with their sshd)
true
