#!/bin/bash
# Every user path of two xroce revisions side by side, interleaved (A B A B ...), on one machine:
# RC WRITE bandwidth and SEND latency (xroce perf between two namespaces), UD SEND bandwidth,
# many QPs and RDMA CM setup rate (xroce perf qps -cm), streams (xroce perf stream, both protocols
# beside TCP, and stream's veth benchmarks), the
# verbs datapath (roce's veth benchmarks) and the engine alone (qp's benchmarks), each round
# beside its anchors from ../shared/bench (tcppp: a Go TCP ping-pong; udpgso: the raw UDP rate)
# when they are there. Ratios mean something within one run only.
#
# Usage (root): internal/benchreport/sidebyside.sh OLD-REV NEW-REV [ROUNDS]   (default 2 rounds,
# about 3.5 minutes each), or sidebyside.sh -record [ROUNDS]: the working tree's rounds alone,
# labelled with git describe --dirty (make bench-paths compares them with docs/bench-paths.txt).
# go run ./internal/benchpaths FILE... tabulates either output. Traffic stays in namespaces it
# makes (198.18.0.1 and .2); every load is bounded by -D, -n or a timeout.
set -u
[ $# -ge 2 ] || [ "${1:-}" = -record ] || { sed -n '2,13p' "$0"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "sidebyside: run as root (namespaces, XDP)" >&2; exit 1; }
top=$(git rev-parse --show-toplevel) || exit 1
out=${SIDEBYSIDE_DIR:-/tmp/xroce-sidebyside}
rounds=${3:-2}
mkdir -p "$out"
build() { # build REV [TREE]: binaries of REV (from TREE, else a worktree of REV) in $out/REV
	local rev=$1 d="$out/$1" wt="$out/wt-$1"
	if [ -n "${2:-}" ]; then
		rm -rf "$d" && mkdir -p "$d" && (cd "$2" && CGO_ENABLED=0 go build -o "$d/xroce" ./cmd/xroce &&
			for p in qp roce stream; do go test -c -o "$d/$p.test" ./$p || exit 1; done) || exit 1
		return
	fi
	[ -x "$d/xroce" ] && return
	git -C "$top" worktree add -q --detach "$wt" "$rev" || exit 1
	mkdir -p "$d"
	(cd "$wt" && CGO_ENABLED=0 go build -o "$d/xroce" ./cmd/xroce &&
		for p in qp roce stream; do go test -c -o "$d/$p.test" ./$p || exit 1; done) || exit 1
	git -C "$top" worktree remove --force "$wt"
}
anchors() {
	local b=$top/../shared/bench
	[ -d "$b" ] || return
	(cd "$b/tcppp" && CGO_ENABLED=0 go build -o "$out/tcppp" .) && (cd "$b/udpgso" && CGO_ENABLED=0 go build -o "$out/udpgso" .)
}
ns() { ip netns exec "$@"; }
netns_up() {
	netns_down
	ip netns add sbs0 && ip netns add sbs1 &&
		ip link add sbs0a netns sbs0 type veth peer name sbs0b netns sbs1 &&
		ns sbs0 ip addr add 198.18.0.1/24 dev sbs0a && ns sbs1 ip addr add 198.18.0.2/24 dev sbs0b &&
		ns sbs0 ip link set sbs0a up && ns sbs1 ip link set sbs0b up &&
		ns sbs0 ip link set lo up && ns sbs1 ip link set lo up && sleep 1
}
netns_down() { ip netns del sbs0 2>/dev/null; ip netns del sbs1 2>/dev/null; true; }
pair() { # pair NAME SERVER... -- CLIENT...: prints the client's result lines (and the server's with -s)
	local name=$1 s=() c=(); shift
	while [ "$1" != "--" ]; do s+=("$1"); shift; done; shift; c=("$@")
	ns sbs1 timeout 120 "${s[@]}" >"$out/srv.txt" 2>&1 &
	local sp=$!
	sleep 1
	ns sbs0 timeout 120 "${c[@]}" >"$out/cli.txt" 2>&1
	wait $sp
	echo "== $name"
	grep -E '^ *[0-9]|round trips|received' "$out/cli.txt" "$out/srv.txt" | sed 's/^[^:]*://' | tail -2
}
round() { # round REV
	local b=$out/$1 p=(-stat-dir "")
	echo "=== $1"
	netns_up || { echo "sidebyside: no namespaces" >&2; exit 1; }
	pair "rc write_bw 64KiB, MB/s" "$b/xroce" perf write_bw -d sbs0b -s 65536 -D 3 "${p[@]}" -- "$b/xroce" perf write_bw -d sbs0a -s 65536 -D 3 "${p[@]}" 198.18.0.2
	pair "rc send_lat 8B, µs: min max typical avg stdev 99% 99.9%" "$b/xroce" perf send_lat -d sbs0b -s 8 -n 20000 "${p[@]}" -- "$b/xroce" perf send_lat -d sbs0a -s 8 -n 20000 "${p[@]}" 198.18.0.2
	pair "ud send_bw 1KiB, MB/s (sent)" "$b/xroce" perf send_bw -c UD -d sbs0b -s 1024 -D 3 "${p[@]}" -- "$b/xroce" perf send_bw -c UD -d sbs0a -s 1024 -D 3 "${p[@]}" 198.18.0.2
	if [ -x "$out/tcppp" ]; then
		pair "anchor: Go TCP ping-pong 8B" "$out/tcppp" -l 198.18.0.2:5001 -s 8 -- "$out/tcppp" -c 198.18.0.2:5001 -s 8 -n 20000 -d 3s
		pair "anchor: raw UDP GSO/GRO 1400B" "$out/udpgso" -r 198.18.0.2:4791 -d 4s -- "$out/udpgso" -s 198.18.0.2:4791 -seg 1400 -batch 15 -d 3s
	fi
	netns_down
	echo "== perf qps -cm: QPs size Gbit/s ratio Jain slowest setup/s timeouts retrans"
	timeout 300 "$b/xroce" perf qps -cm -q 1,16,256 -s 4096,65536 -D 2s "${p[@]}" 2>&1 | grep -E '^ +[0-9]'
	echo "== perf stream: both protocols beside TCP, in one process"
	timeout 300 "$b/xroce" perf stream -netns -D 2 2>/dev/null
	echo "== streams"
	(cd "$top/stream" && timeout 300 "$b/stream.test" -test.run '^$' -test.bench Veth -test.benchtime 2s 2>&1 | grep ^Benchmark)
	echo "== roce veth"
	(cd "$top/roce" && timeout 300 "$b/roce.test" -test.run '^$' -test.bench 'VethWrite$|VethPingPong' -test.benchtime 2s 2>&1 | grep ^Benchmark)
	echo "== qp"
	(cd "$top/qp" && timeout 300 "$b/qp.test" -test.run '^$' -test.bench . -test.benchtime 1s 2>&1 | grep ^Benchmark)
}
trap netns_down EXIT
if [ "$1" = -record ]; then
	rounds=${2:-1}
	rev=$(git -C "$top" describe --always --dirty --abbrev=7) || exit 1
	build "$rev" "$top"; anchors
	echo "sidebyside: record $rev, $(date -u +%Y-%m-%dT%H:%MZ), $rounds rounds, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	for i in $(seq "$rounds"); do round "$rev"; done
	echo "sidebyside: done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	exit 0
fi
old=$(git -C "$top" rev-parse --short "$1") && new=$(git -C "$top" rev-parse --short "$2") || exit 1
build "$old"; build "$new"; anchors
echo "sidebyside: $old vs $new, $rounds rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$rounds"); do round "$old"; round "$new"; done
echo "sidebyside: done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
