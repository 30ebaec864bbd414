#!/usr/bin/env bash
# The README's three-machine quick start, by hand, on three network namespaces (10.231.0.1-3
# on a bridge), as root: every node a voter, C (n3) also a Docker worker; everything asked
# through A (n1). Not part of the test run — the end-to-end tests pin each behaviour; this is
# the operator's path in one go (issue 54's "run again by hand on namespaces").
#
#   scripts/namespaces-quickstart.sh          # APIs on each node's address, TLS pinned (README)
#   MODE=loopback scripts/namespaces-quickstart.sh
#                                             # APIs on each node's own loopback (operations.md):
#                                             # the CLI runs inside A's namespace, and the others
#                                             # are reached through A (API tunnels)
#
# Needs the sandbox image (`chorus sandbox image build`). B=path/to/chorus (target/debug/chorus).
set -u
B=${B:-$(cd "$(dirname "$0")/.." && pwd)/target/debug/chorus}
MODE=${MODE:-tls}
W=/tmp/hand
cleanup() {
  pkill -f "$W/swarm.key" 2>/dev/null; sleep 1
  for i in 1 2 3; do ip netns del chn$i 2>/dev/null; ip link del vch$i 2>/dev/null; done
  # A namespace goes (and its veth with it) in the kernel's own time.
  for _ in $(seq 50); do ip link show vch1 >/dev/null 2>&1 || ip link show vch2 >/dev/null 2>&1 || ip link show vch3 >/dev/null 2>&1 || break; sleep 0.1; done
  ip link del chbr0 2>/dev/null
  iptables -D FORWARD -i chbr0 -o chbr0 -j ACCEPT 2>/dev/null
}
cleanup; rm -rf $W; mkdir -p $W; cd $W
ip link add chbr0 type bridge && ip addr add 10.231.0.254/24 dev chbr0 && ip link set chbr0 up
# Docker's FORWARD policy drops bridged traffic that br_netfilter hands to iptables.
iptables -I FORWARD -i chbr0 -o chbr0 -j ACCEPT
for i in 1 2 3; do
  ip netns add chn$i
  ip link add vch$i type veth peer name eth0 netns chn$i
  ip link set vch$i master chbr0 up
  ip -n chn$i addr add 10.231.0.$i/24 dev eth0
  ip -n chn$i link set eth0 up; ip -n chn$i link set lo up
  mkdir -p $W/n$i
done
$B psk generate swarm.key >/dev/null; (umask 077; openssl rand -hex 32 > acl.key 2>/dev/null || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > acl.key)
common="--listen /ip4/0.0.0.0/tcp/7946 --cluster-id prod --bootstrap-expect 3 --psk-file $W/swarm.key --acl-key-file $W/acl.key"
start() { # i extra...
  local i=$1; shift
  local http=""
  [ "$MODE" = tls ] && http="--http 10.231.0.$i:7070"
  ip netns exec chn$i setsid sh -c "cd $W/n$i && exec $B run $common $http $* > $W/n$i/log 2>&1" < /dev/null &
}
start 1
for _ in $(seq 50); do grep -q "chorus node started" $W/n1/log 2>/dev/null && break; sleep 0.2; done
A=$(grep -o 'peer_id=[^ ]*' $W/n1/log | head -1 | cut -d= -f2)
echo "A = $A"
start 2 --bootstrap /ip4/10.231.0.1/tcp/7946/p2p/$A
start 3 --bootstrap /ip4/10.231.0.1/tcp/7946/p2p/$A --capability admin_election --capability docker --docker
if [ "$MODE" = loopback ]; then
  on1() { ip netns exec chn1 sh -c "cd $W/n1 && $*"; }
else
FP=""
for _ in $(seq 50); do FP=$(grep -o 'fingerprint=[^ ]*' $W/n1/log | head -1 | cut -d= -f2); [ -n "$FP" ] && break; sleep 0.2; done
echo "A's fingerprint: $FP"
# From the root namespace, as an operator's machine: A's TLS API, pinned, with A's token.
on1() { sh -c "cd $W && CHORUS_ADDR=https://10.231.0.1:7070 CHORUS_TLS_FINGERPRINT=$FP CHORUS_TOKEN_FILE=$W/n1/chorus-data/management.token $*"; }
fi
for _ in $(seq 60); do on1 "$B status --json" 2>/dev/null | grep -q '"admin":"' && break; sleep 0.5; done
echo "== status --cluster (through A)"; on1 "$B status --cluster"
echo "== a task on C, its logs through A"
tid=$(on1 "$B task submit --image chorus/sandbox:latest -- sh -c 'echo hello-from-C; echo to-stderr >&2'")
echo "task: $tid"; on1 "$B task logs -f $tid"; echo "exit $?"
echo "== a live sandbox on C through A"
sb=$(on1 "$B sandbox create")
echo "sandbox $sb"; on1 "$B sandbox exec $sb -- sh -c 'echo in-sandbox; hostname'"; on1 "$B sandbox close $sb"
echo "== warnings in the logs"
grep -h "WARN" $W/n*/log | sed 's/^[^ ]* //' | sort | uniq -c | head -20
cleanup
