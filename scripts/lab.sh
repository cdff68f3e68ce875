#!/usr/bin/env bash
# rmr's network lab on one machine: network namespaces joined by veth pairs,
# each rail optionally rate-limited with tbf on both ends. Addresses come from
# 198.18.0.0/15 (set aside for benchmarking) and exist only inside the lab's
# namespaces; nothing is added to the root namespace.
#
#   lab.sh pair PREFIX RATES            two hosts PREFIX-a, PREFIX-b; one rail per
#                                       comma-separated rate (e.g. 1gbit,1gbit or
#                                       400mbit,100mbit; none = unshaped).
#                                       rail i: 198.18.i.1 (a) <-> 198.18.i.2 (b)
#   lab.sh zipper PREFIX NBRIDGES RATE_A RATE_B
#                                       cluster host PREFIX-ca, zipper nodes
#                                       PREFIX-z0.., cluster host PREFIX-cb;
#                                       bridge k: ca 198.18.(10+k).1 <-> zk .2,
#                                       zk 198.18.(20+k).1 <-> cb .2; forwarding off
#   lab.sh down PREFIX                  remove every namespace PREFIX-*
#   lab.sh status PREFIX                show namespaces, addresses, qdiscs
#   lab.sh check                        can this machine build a lab? (exit 0/1)
#   lab.sh cut PREFIX RAIL / heal PREFIX RAIL
#                                       take rail RAIL's link down / up again
#   lab.sh rate PREFIX RAIL RATE        reshape rail RAIL (both ends) to RATE
#   LAB_MTU=9000 lab.sh pair|zipper ... every veth with that MTU (default 1500;
#                                       9000: jumbo frames, as cluster Ethernet)
set -euo pipefail

die() { echo "lab.sh: $*" >&2; exit 1; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_tools() {
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null || die "iproute2 missing and could not be installed"
  fi
  [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
}

# Rate in bytes/s from tc syntax (1gbit, 400mbit, 100kbit, 5000000bit).
rate_bytes() {
  local r=${1,,} n unit
  n=${r%%[a-z]*}; unit=${r#"$n"}
  case "$unit" in
    gbit) echo $(( n * 1000000000 / 8 ));; mbit) echo $(( n * 1000000 / 8 ));;
    kbit) echo $(( n * 1000 / 8 ));; bit|"") echo $(( n / 8 ));;
    *) die "bad rate '$1' (use e.g. 1gbit, 400mbit)";;
  esac
}

# tbf on one device: burst = 1 ms of traffic, at least 128 KiB so that GSO
# super-packets (up to 64 KiB) pass; a larger burst would let short samples
# run at memory speed and overstate small-message bandwidth. 20 ms queue.
shape() {
  local ns=$1 dev=$2 rate=$3
  case "$rate" in none|0|"") return 0;; esac
  local bps burst
  bps=$(rate_bytes "$rate")
  burst=$(( bps / 1000 )); [ "$burst" -lt 131072 ] && burst=131072
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
}

down() {
  local p=$1
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${p}-" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
}

mkns() { ip netns add "$1"; ip netns exec "$1" ip link set lo up; }

link() { # ns1 dev1 addr1 ns2 dev2 addr2 rate
  ip link add "$2" type veth peer name "$5"
  ip link set "$2" netns "$1"; ip link set "$5" netns "$4"
  ip netns exec "$1" ip addr add "$3/24" dev "$2"; ip netns exec "$1" ip link set "$2" up
  ip netns exec "$4" ip addr add "$6/24" dev "$5"; ip netns exec "$4" ip link set "$5" up
  if [ "$MTU" != 1500 ]; then
    ip netns exec "$1" ip link set "$2" mtu "$MTU"; ip netns exec "$4" ip link set "$5" mtu "$MTU"
  fi
  shape "$1" "$2" "$7"; shape "$4" "$5" "$7"
}

MTU=${LAB_MTU:-1500}
# Checked by the commands that build a lab, before they make anything.
check_mtu() {
  [[ "$MTU" =~ ^[0-9]+$ ]] && [ "$MTU" -ge 576 ] && [ "$MTU" -le 65535 ] || die "bad LAB_MTU '$MTU' (576..65535)"
}

cmd=${1:-}; shift || true
case "$cmd" in
  pair)
    [ $# -eq 2 ] || usage
    check_mtu; need_tools; p=$1; IFS=, read -ra rates <<< "$2"
    [ ${#p} -le 8 ] || die "prefix '$p' too long (8 characters at most)"
    down "$p"; mkns "$p-a"; mkns "$p-b"
    for i in "${!rates[@]}"; do
      link "$p-a" "${p}a$i" "198.18.$i.1" "$p-b" "${p}b$i" "198.18.$i.2" "${rates[$i]}"
      echo "rail $i: 198.18.$i.1 <-> 198.18.$i.2 rate ${rates[$i]}"
    done ;;
  zipper)
    [ $# -eq 4 ] || usage
    check_mtu; need_tools; p=$1; nb=$2; ra=$3; rb=$4
    [[ "$nb" =~ ^[12]$ ]] || die "NBRIDGES must be 1 or 2"
    down "$p"; mkns "$p-ca"; mkns "$p-cb"
    for k in $(seq 0 $((nb - 1))); do
      mkns "$p-z$k"
      ip netns exec "$p-z$k" sysctl -qw net.ipv4.ip_forward=0
      link "$p-ca" "${p}ca$k" "198.18.$((10 + k)).1" "$p-z$k" "${p}za$k" "198.18.$((10 + k)).2" "$ra"
      link "$p-z$k" "${p}zb$k" "198.18.$((20 + k)).1" "$p-cb" "${p}cb$k" "198.18.$((20 + k)).2" "$rb"
      echo "bridge $k: A 198.18.$((10 + k)).1 <-> z$k .2 ($ra); z$k 198.18.$((20 + k)).1 <-> B .2 ($rb)"
    done ;;
  down) [ $# -eq 1 ] || usage; down "$1" ;;
  cut|heal)
    [ $# -eq 2 ] || usage
    state=down; [ "$cmd" = heal ] && state=up
    ip netns exec "$1-a" ip link set "${1}a$2" "$state" ;;
  rate)
    [ $# -eq 3 ] || usage
    shape "$1-a" "${1}a$2" "$3"; shape "$1-b" "${1}b$2" "$3" ;;
  status)
    [ $# -eq 1 ] || usage
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^$1-" || true); do
      echo "== $ns"; ip netns exec "$ns" ip -br addr; ip netns exec "$ns" tc qdisc show | grep -v noqueue || true
    done ;;
  check)
    need_tools; t="rmrchk$$"
    trap 'ip netns del "$t-a" 2>/dev/null || true; ip netns del "$t-b" 2>/dev/null || true' EXIT
    mkns "$t-a" && mkns "$t-b" || die "cannot create network namespaces"
    link "$t-a" "${t:0:6}x0" 198.18.99.1 "$t-b" "${t:0:6}y0" 198.18.99.2 100mbit || die "cannot create a shaped veth pair"
    echo "lab: ok (namespaces, veth, tbf)" ;;
  *) usage ;;
esac
