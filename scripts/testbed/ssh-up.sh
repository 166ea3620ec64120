#!/bin/bash
# N key-only sshd "hosts" in own netns on bridge br-infra (10.213.0.11..), plus one on 127.0.0.1:2222 in the root netns.
# Each netns host also has its own disk: its sshd runs in a private mount namespace where
# $BASE/vm/hN is bind-mounted on /var/lib/tcl-shim, and every process started through it inherits that.
set -euo pipefail
BASE=${BASE:-/tmp/tcl-testbed}; D=$BASE/ssh; N=${N:-3}; BR=br-infra; NET=10.213.0
mkdir -p $D /run/sshd && chmod 700 $D      # /run/sshd: privilege-separation dir, sshd refuses to start without it
[ -f $D/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C ci-test -f $D/id_ed25519
cp $D/id_ed25519.pub $D/authorized_keys; chmod 600 $D/authorized_keys
: > $D/known_hosts
mk_sshd() {  # name listen-addr port [netns]
  local name=$1 addr=$2 port=$3 ns=${4:-}
  [ -f $D/hostkey_$name ] || ssh-keygen -q -t ed25519 -N '' -f $D/hostkey_$name
  cat > $D/sshd_$name.conf <<CONF
Port $port
ListenAddress $addr
HostKey $D/hostkey_$name
PidFile $D/sshd_$name.pid
AuthorizedKeysFile $D/authorized_keys
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
# root's ~/.bashrc (sourced by bash for every ssh command) may run "pyenv rehash", whose lock a
# killed session leaves behind (the TPU shutdown-script test SIGKILLs one): then every later
# command waited 60 s for it. One second, then it goes on without rehashing.
SetEnv PYENV_REHASH_TIMEOUT=1
CONF
  /usr/sbin/sshd -t -f $D/sshd_$name.conf          # must be an absolute path
  if [ -n "$ns" ]; then   # own disk: a private mount namespace with $BASE/vm/NAME on /var/lib/tcl-shim
    mkdir -p $BASE/vm/$name /var/lib/tcl-shim
    ip netns exec $ns unshare -m --propagation private sh -c \
      "mount --bind $BASE/vm/$name /var/lib/tcl-shim && exec /usr/sbin/sshd -f $D/sshd_$name.conf -E $D/sshd_$name.log"
  else
    /usr/sbin/sshd -f $D/sshd_$name.conf -E $D/sshd_$name.log   # daemonizes, pid in PidFile
  fi
  local hk; hk=$(cut -d' ' -f1,2 $D/hostkey_$name.pub)
  if [ "$port" = 22 ]; then echo "$addr $hk"; else echo "[$addr]:$port $hk"; fi >> $D/known_hosts
}
ip link add $BR type bridge 2>/dev/null || true
ip addr replace $NET.1/24 dev $BR; ip link set $BR up
# Docker's FORWARD policy DROP + br_netfilter would drop netns<->netns frames on our bridge:
iptables -C FORWARD -i $BR -o $BR -j ACCEPT 2>/dev/null || iptables -I FORWARD -i $BR -o $BR -j ACCEPT
for i in $(seq 1 $N); do
  ns=infra-h$i; ip=$NET.$((10+i))
  # `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts: inside a host, its own
  # hostname resolves to its own address, as on a real machine (gloo, used by jax.distributed
  # on CPU, announces the address its hostname resolves to).
  mkdir -p /etc/netns/$ns
  { grep -v -w -e "$(hostname)" -e "$(hostname -s)" /etc/hosts || true
    echo "$ip $(hostname) $(hostname -s)"; } > /etc/netns/$ns/hosts
  ip netns add $ns
  ip link del veth-h$i 2>/dev/null || true   # a pair left by a netns that was still dying
  ip link add veth-h$i type veth peer name eth0 netns $ns
  ip link set veth-h$i master $BR up
  ip -n $ns addr add $ip/24 dev eth0
  ip -n $ns link set lo up; ip -n $ns link set eth0 up
  ip -n $ns route add default via $NET.1
  mk_sshd h$i $ip 22 $ns
done
mk_sshd lo 127.0.0.1 2222
cat > $D/ssh_config <<CONF
Host *
  User root
  IdentityFile $D/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $D/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
CONF
