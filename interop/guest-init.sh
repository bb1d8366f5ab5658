#!/bin/bash
# PID 1 of the interop VM (see interop/README.md). It runs the modes named in
# XROCE_MODE (a kernel parameter, comma-separated: selftest, loss, tap, xroce,
# xloss, cm, cmloss, conform, compare), writes
# logs, captures and results.tsv to the 9p share mounted at /out, then powers
# the VM off. Every test is one row of /out/results.tsv:
#   NAME <tab> PASS|FAIL|SKIP <tab> SECONDS <tab> DETAIL
# The host (interop/run) adds its own rows and prints the table.

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C

poweroff_now() {
	sync
	echo o >/proc/sysrq-trigger
	sleep 10
}
trap poweroff_now EXIT

mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
# The captures are written here before they go to /out: room for a few
# hundred thousand frames.
mount -t tmpfs -o size=1400m tmp /tmp
modprobe -a 9pnet_virtio 9p
mkdir -p /out
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /out; then
	echo "guest: cannot mount the 9p share"
	exit 1
fi
mkdir -p /out/logs /out/pcap
# The serial console gets a line per test; the rest goes to /out/logs.
exec 2>>/out/logs/guest-init.txt
echo "guest: up $(cut -d' ' -f1 /proc/uptime)s, kernel $(uname -r), modes ${XROCE_MODE:=selftest}"
echo "$(cut -d' ' -f1 /proc/uptime)" >/out/boot-seconds

RESULTS=/out/results.tsv
now() { cut -d' ' -f1 /proc/uptime; }
# result NAME STATUS T0 DETAIL: one row, seconds since T0; the detail's tabs
# and line breaks (a check that printed several lines) become "; ", so that a
# row stays one line of four fields.
result() {
	local d=${4//$'\r'/}
	d=${d//$'\t'/; }
	d=${d//$'\n'/; }
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$(awk -v a="$3" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')" "$d" >>"$RESULTS"
	echo "guest: $2 $1 ($d)"
}

# XROCE_ROWS (kernel parameter, comma-separated shell patterns) limits the
# tool rows to those whose name matches one; XROCE_REPEAT runs each of them
# that many times, as NAME.r1, NAME.r2, ... (interop/run's XROCE_INTEROP_ROWS
# and XROCE_INTEROP_REPEAT).
# want NAME: whether the row NAME is selected.
want() {
	local p
	[ -z "${XROCE_ROWS:-}" ] && return 0
	for p in ${XROCE_ROWS//,/ }; do
		# shellcheck disable=SC2053 # p is a pattern
		[[ $1 == $p ]] && return 0
	done
	return 1
}

# rowrun FUNC NAME ARGS...: FUNC NAME ARGS... if NAME is selected, once or
# XROCE_REPEAT times.
rowrun() {
	local f=$1 name=$2 r
	shift 2
	want "$name" || return 0
	if [ "${XROCE_REPEAT:-1}" -le 1 ]; then
		"$f" "$name" "$@"
		return
	fi
	for r in $(seq "$XROCE_REPEAT"); do
		"$f" "$name.r$r" "$@"
	done
}

# rxe_snapshot FILE: rxe's counters and QPs (the requester's and responder's
# PSNs), taken when a run has stalled, to tell who waits for what.
rxe_snapshot() {
	{
		date +%T.%N
		local d
		for d in /sys/class/infiniband/*; do
			echo "== ${d##*/} hw_counters"
			grep -H . "$d"/ports/1/hw_counters/* 2>/dev/null | sed 's|.*/||'
		done
		echo "== rdma res show qp"
		rdma res show qp 2>&1
		echo "== tools"
		pgrep -a '^(ibv_|ib_)' 2>&1
		[ "${XROCE_RXE_TRACE:-0}" = 1 ] && cp /sys/kernel/tracing/trace "$1.trace"
		echo "== eth0"
		tc -s qdisc show dev eth0 2>&1
		ethtool -S eth0 2>&1 | grep -E 'tx|kick' | paste -sd' '
		grep -E 'virtio' /proc/interrupts 2>&1
	} >>"$1" 2>&1
}

# stall_watch PID HOSTNAME FILE: waits while PID (a `timeout ... TOOL &`)
# runs; when the host program HOSTNAME has ended and the tool still runs 10 s
# later, records rxe's counters and QPs and the tool's threads' kernel stacks
# and wait channels in FILE, then stops the tool: with the host's end
# gone, nothing more can come for it (see rs_rcopy_race).
stall_watch() {
	local pid=$1 ended=0 t
	while kill -0 "$pid" 2>/dev/null; do
		[ -s "/out/host/$2.rc" ] && ended=$((ended + 1))
		if [ $ended -eq 50 ]; then
			rxe_snapshot "$3"
			for t in $(pgrep -P "$pid"); do
				echo "== threads of $(tr '\0' ' ' <"/proc/$t/cmdline" 2>/dev/null)"
				grep -H . /proc/"$t"/task/*/wchan /proc/"$t"/task/*/stack 2>/dev/null
			done >>"$3"
			stop "$pid"
		fi
		sleep 0.2
	done
}

# stop PID: ends a tool started as `timeout ... TOOL &` (PID is timeout's).
# timeout passes a TERM on to the tool; killing timeout itself would leave the
# tool running (an RC client would retransmit for the rest of the run).
stop() {
	kill -TERM "$1" 2>/dev/null || return 0
	for _ in $(seq 20); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	pkill -KILL -P "$1"
	kill -KILL "$1" 2>/dev/null
}

# wait_listen PORT: until a TCP socket listens on PORT (10 s at most).
wait_listen() {
	for _ in $(seq 100); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		sleep 0.1
	done
	return 1
}

# netns_wait_listen NS PID: until a TCP socket listens on 18515 in the
# namespace NS (10 s at most), or PID, the server, has ended.
netns_wait_listen() {
	for _ in $(seq 100); do
		ip netns exec "$1" ss -Hltn "sport = :18515" | grep -q . && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# detail FILE: the figures worth showing from a tool's output.
detail() {
	local l
	# ibv_*_pingpong: "8192000 bytes in 0.75 seconds = 87.01 Mbit/sec"
	l=$(grep -E 'bytes in .* seconds' "$1" | tail -1)
	# perftest: the figures row under the "#bytes #iterations ..." header
	# (the first line that starts with a number: warnings and progress lines
	# may come between).
	[ -n "$l" ] || l=$(awk '
		/#bytes.*BW average/ { bw = 1; next }
		/#bytes.*t_typical/ { lat = 1; next }
		bw && $1 ~ /^[0-9]+$/ { printf "%s B x %s: %s MB/s average, %s peak", $1, $2, $4, $3; exit }
		lat && $1 ~ /^[0-9]+$/ { printf "%s B x %s: typical %s us, avg %s, min %s, max %s", $1, $2, $5, $6, $3, $4; exit }' "$1")
	[ -n "$l" ] || l=$(grep -v -e '^ *$' -e '^-*$' "$1" | tail -1)
	echo "$l" | tr '\t' ' ' | cut -c1-150
}

# pair NAME TIMEOUT SERVER_CMD... -- CLIENT_ARGS...: run the server, then the
# same tool as a client against it; PASS when both exit 0. These rows are
# rxe against rxe (the guest's own check, no xroce in them). One first-run
# failure is run once more (rule rerun): rxe 6.1's requester stall under
# loss (see interop/README.md, "Known failures"; CI met it once in
# loss.rc_pingpong.s4097), which shows as a row of the loss mode whose server
# exited 0 and whose client was killed by its timeout (exit 137). A row that
# fails that way and then passes passes "by rule rerun"; any other failure,
# of the first run or of the second, fails. The first run's logs stay as
# NAME.*.txt.first.
pair() { rowrun _pair "$@"; }
_pair() {
	local name=$1 to=$2 t0 srv=() cli=() why="" f
	shift 2
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	t0=$(now)
	_pair_run "$name" "$to" "${srv[@]}" -- "${cli[@]}"
	if [ -n "$PAIR_WHY" ] && [[ $name == loss.* ]] && [ "$PAIR_SRC/$PAIR_CRC" = 0/137 ]; then
		why="the first run stalled as rxe's requester does under loss: server exit 0, client killed after ${to}s ($PAIR_WHY)"
		for f in /out/logs/"$name".{server,client}.txt; do [ -e "$f" ] && mv "$f" "$f.first"; done
		_pair_run "$name" "$to" "${srv[@]}" -- "${cli[@]}"
	fi
	if [ -z "$PAIR_WHY" ] && [ -n "$why" ]; then
		result "$name" PASS "$t0" "by rule rerun: $(detail "/out/logs/$name.client.txt"); passed on a second run, $why"
	elif [ -z "$PAIR_WHY" ]; then
		result "$name" PASS "$t0" "$(detail "/out/logs/$name.client.txt")"
	else
		result "$name" FAIL "$t0" "$PAIR_WHY${why:+ (on the second run; $why)}"
	fi
}

# _pair_run NAME TIMEOUT SERVER_CMD... -- CLIENT_ARGS...: one run of a pair
# row; PAIR_WHY is empty when both ended 0, else why not.
_pair_run() {
	local name=$1 to=$2 srv=() cli=() spid src crc
	shift 2
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	PAIR_WHY="" PAIR_SRC="" PAIR_CRC=""
	timeout -s KILL "$to" "${srv[@]}" >"/out/logs/$name.server.txt" 2>&1 &
	spid=$!
	if ! wait_listen 18515; then
		stop "$spid"
		wait "$spid"
		PAIR_WHY="server did not listen on 18515"
		return
	fi
	timeout -s KILL "$to" "${cli[@]}" >"/out/logs/$name.client.txt" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	PAIR_SRC=$src PAIR_CRC=$crc
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		PAIR_WHY="server exit $src, client exit $crc: $(grep -v '^ *$' "/out/logs/$name.client.txt" | tail -1 | cut -c1-100)"
	fi
}

# veth_pair: vethA 198.18.0.1 (rxe0) and vethB 198.18.0.2 (rxe1), both in the
# initial namespace (rxe 6.1 sends only from there), the wire forced between
# them by policy routing on the output interface rxe looks routes up with.
veth_pair() {
	[ -e /sys/class/net/vethA ] && return 0
	modprobe -a veth rdma_rxe ib_uverbs sch_netem
	ip link set lo up
	ip link add vethA type veth peer name vethB
	ip addr add 198.18.0.1/24 dev vethA
	ip addr add 198.18.0.2/24 dev vethB
	ip link set vethA up
	ip link set vethB up
	local i
	for i in all default vethA vethB; do
		sysctl -qw "net.ipv4.conf.$i.accept_local=1" "net.ipv4.conf.$i.rp_filter=0"
	done
	ip rule add pref 100 lookup local
	ip rule del pref 0 lookup local
	ip rule add pref 10 oif vethA lookup 10
	ip route add 198.18.0.0/24 dev vethA src 198.18.0.1 table 10
	ip rule add pref 11 oif vethB lookup 11
	ip route add 198.18.0.0/24 dev vethB src 198.18.0.2 table 11
	ip neigh replace 198.18.0.2 lladdr "$(cat /sys/class/net/vethB/address)" dev vethA nud permanent
	ip neigh replace 198.18.0.1 lladdr "$(cat /sys/class/net/vethA/address)" dev vethB nud permanent
	rdma link add rxe0 type rxe netdev vethA
	rdma link add rxe1 type rxe netdev vethB
	for _ in $(seq 50); do
		[ -s /sys/class/infiniband/rxe1/ports/1/gids/1 ] &&
			! grep -q '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/rxe1/ports/1/gids/1 && break
		sleep 0.1
	done
	rdma link show
	cat /sys/class/infiniband/rxe{0,1}/ports/1/gids/1
}

# capture NAME: tcpdump on vethA (it sees both directions) into /tmp.
capture_start() {
	tcpdump -i vethA -s 0 -B 65536 -w "/tmp/$1.pcap" udp port 4791 2>"/out/logs/$1.tcpdump.txt" &
	TCPDUMP=$!
	for _ in $(seq 50); do
		grep -q 'listening on' "/out/logs/$1.tcpdump.txt" && break
		sleep 0.1
	done
}
capture_stop() {
	sleep 0.5
	kill -INT "$TCPDUMP"
	wait "$TCPDUMP"
	cp "/tmp/$1.pcap" "/out/pcap/$1.pcap"
	rm -f "/tmp/$1.pcap"
	grep -E 'captured|dropped' "/out/logs/$1.tcpdump.txt" | paste -sd' '
}

# rxe_tools PREFIX LOSSY: the standard tools between rxe0 (server) and rxe1.
rxe_tools() {
	local p=$1 lossy=$2 s
	for s in 13 1024 4097 65536; do
		pair "$p.rc_pingpong.s$s" 60 ibv_rc_pingpong -d rxe0 -g 1 -m 1024 -s "$s" -n 50 -c -- \
			ibv_rc_pingpong -d rxe1 -g 1 -m 1024 -s "$s" -n 50 -c 198.18.0.1
	done
	if [ "$lossy" = 0 ]; then
		pair "$p.ud_pingpong" 60 ibv_ud_pingpong -d rxe0 -g 1 -s 1000 -n 50 -c -- \
			ibv_ud_pingpong -d rxe1 -g 1 -s 1000 -n 50 -c 198.18.0.1
	else
		result "$p.ud_pingpong" SKIP "$(now)" "UD is unreliable: ud_pingpong waits forever for a lost packet"
	fi
	pair "$p.srq_pingpong" 60 ibv_srq_pingpong -d rxe0 -g 1 -m 1024 -q 4 -n 50 -- \
		ibv_srq_pingpong -d rxe1 -g 1 -m 1024 -q 4 -n 50 198.18.0.1
	local pt=(-x 1 -F -n 100)
	pair "$p.ib_write_bw" 90 ib_write_bw -d rxe0 "${pt[@]}" -- ib_write_bw -d rxe1 "${pt[@]}" 198.18.0.1
	pair "$p.ib_read_bw" 90 ib_read_bw -d rxe0 "${pt[@]}" -- ib_read_bw -d rxe1 "${pt[@]}" 198.18.0.1
	pair "$p.ib_send_bw" 90 ib_send_bw -d rxe0 "${pt[@]}" -- ib_send_bw -d rxe1 "${pt[@]}" 198.18.0.1
	pair "$p.ib_atomic_bw" 90 ib_atomic_bw -d rxe0 "${pt[@]}" -- ib_atomic_bw -d rxe1 "${pt[@]}" 198.18.0.1
	pair "$p.ib_write_lat" 90 ib_write_lat -d rxe0 -x 1 -F -n 200 -- ib_write_lat -d rxe1 -x 1 -F -n 200 198.18.0.1
}

mode_selftest() {
	local t0
	t0=$(now)
	veth_pair
	result selftest.setup PASS "$t0" "rxe0 vethA 198.18.0.1, rxe1 vethB 198.18.0.2, GID index 1 $(cat /sys/class/infiniband/rxe0/ports/1/gids/1)"
	capture_start selftest
	rxe_tools selftest 0
	t0=$(now)
	result selftest.tcpdump PASS "$t0" "$(capture_stop selftest)"
	# The static xroce binary from the share runs in the guest too.
	t0=$(now)
	if [ -x /out/xroce ] && /out/xroce dump -q /out/pcap/selftest.pcap >/out/logs/selftest.guest-dump.txt 2>&1; then
		result selftest.guest_xroce_dump PASS "$t0" "$(grep -E 'packets:' /out/logs/selftest.guest-dump.txt | tr -d '\n')"
	else
		result selftest.guest_xroce_dump FAIL "$t0" "$(tail -1 /out/logs/selftest.guest-dump.txt 2>/dev/null)"
	fi
}

mode_loss() {
	local t0
	t0=$(now)
	veth_pair
	# Loss on the servers' side only (vethA egress: their requests and
	# ACKs): with the client's ACKs lost too, a lost ACK of the server's
	# last message leaves the server retransmitting to a client that has
	# already exited (seen with srq_pingpong's 4 QPs), a race of the tools.
	tc qdisc replace dev vethA root netem loss 1%
	result loss.setup PASS "$t0" "netem loss 1% on vethA egress (rxe0, the servers' requests and ACKs)"
	capture_start loss
	rxe_tools loss 1
	t0=$(now)
	result loss.tcpdump PASS "$t0" "$(capture_stop loss)"
	tc -s qdisc show dev vethA >/out/logs/loss.netem.txt
	tc qdisc del dev vethA root
	local drops
	drops=$(awk '/dropped/ { gsub(/[(),]/, ""); for (i = 1; i <= NF; i++) if ($i == "dropped") d += $(i+1) } END { print d + 0 }' /out/logs/loss.netem.txt)
	if [ "$drops" -gt 0 ]; then
		result loss.netem_drops PASS "$(now)" "$drops packets dropped by netem"
	else
		result loss.netem_drops FAIL "$(now)" "netem dropped nothing"
	fi
}

# --- the host's half -----------------------------------------------------------
# The host (interop/run) watches /out/host for NAME.cmd files: line 1 a timeout
# in seconds, line 2 a program from the share (xroce or ppexch), then one
# argument a line. It runs the program in its namespace (tap0 198.18.1.1),
# touches NAME.started, writes the output to /out/logs/NAME.txt and, when the
# program ends, its exit status to NAME.rc.

# host_start NAME TIMEOUT PROG ARGS...
host_start() {
	local name=$1
	shift
	mkdir -p /out/host
	rm -f "/out/host/$name.rc" "/out/host/$name.started"
	printf '%s\n' "$@" >"/out/host/$name.tmp" && mv "/out/host/$name.tmp" "/out/host/$name.cmd"
	for _ in $(seq 100); do
		[ -e "/out/host/$name.started" ] && return 0
		sleep 0.1
	done
	return 1
}

# host_wait NAME SECONDS: prints the host program's exit status (124 if it has
# not ended within SECONDS).
host_wait() {
	for _ in $(seq $(($2 * 10))); do
		[ -s "/out/host/$1.rc" ] && { cat "/out/host/$1.rc"; return; }
		sleep 0.1
	done
	echo 124
}

# client_vs_host NAME LOG TIMEOUT CMD...: runs a tool's client against the
# host program NAME (started with host_start); prints the client's exit status.
# The client is run again while its connection is refused (the host's server
# may not listen yet), and stopped 10 s after the host program has ended.
client_vs_host() {
	local name=$1 log=$2 to=$3 rc cpid ended
	shift 3
	for _ in $(seq 30); do
		timeout -s KILL "$to" stdbuf -oL "$@" >"$log" 2>&1 &
		cpid=$!
		ended=0
		while kill -0 "$cpid" 2>/dev/null; do
			[ -s "/out/host/$name.rc" ] && ended=$((ended + 1))
			# The host's side gave up while the tool still runs:
			# record rxe's view of the stall.
			if [ $ended -eq 1 ] && [ "$(cat "/out/host/$name.rc")" != 0 ]; then
				rxe_snapshot "/out/logs/${name%.host-*}.rxe-stall.txt"
				# Does transmitting anything on eth0 unstick rxe?
				ping -c 1 -W 1 198.18.1.1 >/dev/null 2>&1
				sleep 1
				echo "=== after one ping on eth0" >>"/out/logs/${name%.host-*}.rxe-stall.txt"
				rxe_snapshot "/out/logs/${name%.host-*}.rxe-stall.txt"
			fi
			[ $ended -gt 50 ] && { stop "$cpid"; break; }
			sleep 0.2
		done
		wait "$cpid"
		rc=$?
		grep -qE "Couldn't connect|Unable to init the socket connection|Unable to open file descriptor" "$log" || break
		sleep 0.3
	done
	echo "$rc"
}

# --- tap: rxe on the guest's eth0, the tap to the host -------------------------------
TAP_GID=0000:0000:0000:0000:0000:ffff:c612:0102

tap_link() {
	local t0 gid
	[ -e /sys/class/infiniband/rxetap ] && return 0
	t0=$(now)
	# virtio-net frees a sent skb when the device has consumed it (napi_tx=1,
	# the default) or at once (napi_tx=0). rxe 6.1's requester stops at 64
	# unfreed skbs per QP; a retransmission cut short that way, then
	# overtaken by the ACK of the original, leaves rxe's requester unable
	# to see the next send (the stall of issue 7, see interop/README.md).
	# napi_tx=0 keeps rxe far under that limit.
	modprobe virtio_net napi_tx="${XROCE_NAPI_TX:-0}"
	modprobe -a rdma_rxe ib_uverbs
	if [ "${XROCE_RXE_TRACE:-0}" = 1 ]; then
		# kprobes on rxe's requester, completer, transmit and skb
		# destructor; the trace of a stalled run goes to its log.
		mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
		{
			echo 'p:rq rdma_rxe:rxe_requester'
			echo 'r:rqret rdma_rxe:rxe_requester ret=$retval:s32'
			echo 'p:cmp rdma_rxe:rxe_completer'
			echo 'r:cmpret rdma_rxe:rxe_completer ret=$retval:s32'
			echo 'p:xmit rdma_rxe:rxe_xmit_packet'
			echo 'p:dtor rdma_rxe:rxe_skb_tx_dtor'
			# Inside rxe_requester of Debian's 6.1.0-50 (6.1.176-1)
			# build, from its disassembly: the WQE req_next_wqe
			# returned; the in-flight checks with skb_out, req.psn,
			# comp.psn and need_req_skb; the two exits that wait for
			# a destructor (need_req_skb = 1) or an ACK (wait_psn = 1).
			echo 'p:rqwqe rdma_rxe:rxe_requester+0xb9 wqe=%ax:x64'
			echo 'p:rqchk rdma_rxe:rxe_requester+0xf6 skb_out=+0x774(%r14):s32 req_psn=+0x3b8(%r14):u32 comp_psn=+0x42c(%r14):u32 need_req_skb=+0x778(%r14):s32'
			echo 'p:rqwaitpsn rdma_rxe:rxe_requester+0xb71'
			echo 'p:rqneedskb rdma_rxe:rxe_requester+0xb81'
		} >/sys/kernel/tracing/kprobe_events 2>>/out/logs/guest-init.txt
		echo 16384 >/sys/kernel/tracing/buffer_size_kb
		echo 1 >/sys/kernel/tracing/events/kprobes/enable
	fi
	ip link set lo up
	for _ in $(seq 50); do [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done
	ip addr add 198.18.1.2/24 dev eth0
	# MTU 9000, as the host's tap0: rxe's active MTU is then 4096.
	ip link set eth0 mtu 9000
	ip link set eth0 up
	rdma link add rxetap type rxe netdev eth0
	for _ in $(seq 50); do
		gid=$(cat /sys/class/infiniband/rxetap/ports/1/gids/1 2>/dev/null)
		[ "$gid" = $TAP_GID ] && break
		sleep 0.1
	done
	{
		ip -br addr show dev eth0
		rdma link show
		ibv_devinfo -v -d rxetap
		echo "gid 1: $gid type $(cat /sys/class/infiniband/rxetap/ports/1/gid_attrs/types/1)"
	} >/out/logs/tap.devinfo.txt 2>&1
	if [ "$gid" = $TAP_GID ]; then
		result tap.gid PASS "$t0" "rxetap on eth0 (MTU $(cat /sys/class/net/eth0/mtu), virtio-net napi_tx $(cat /sys/module/virtio_net/parameters/napi_tx)): GID index 1 $gid ($(cat /sys/class/infiniband/rxetap/ports/1/gid_attrs/types/1)), active MTU $(awk '/active_mtu/ { print $2; exit }' /out/logs/tap.devinfo.txt)"
	else
		result tap.gid FAIL "$t0" "GID index 1 is '$gid', want ::ffff:198.18.1.2"
	fi
	t0=$(now)
	if ping -c 3 -i 0.2 -W 2 198.18.1.1 >/out/logs/tap.ping.txt 2>&1; then
		result tap.ping PASS "$t0" "$(grep -E 'packets transmitted' /out/logs/tap.ping.txt)"
	else
		result tap.ping FAIL "$t0" "$(grep -E 'packets transmitted' /out/logs/tap.ping.txt)"
	fi
}

# mode_tap: both roles of ibv_rc_pingpong's TCP side channel against the host's
# ppexch, with no RDMA peer on the host: the tool moves its QP to RTR/RTS and
# prints the remote address; a client then sends its first SEND to the QP the
# host announced and retransmits it, unanswered, until it is stopped.
mode_tap() {
	local t0 spid rc
	tap_link

	t0=$(now)
	timeout -s KILL 120 stdbuf -oL ibv_rc_pingpong -d rxetap -g 1 -n 5 -s 64 >/out/logs/tap.server.txt 2>&1 &
	spid=$!
	if wait_listen 18515 && host_start tap.host-client 30 ppexch -connect 198.18.1.2:18515 \
		-gid ::ffff:198.18.1.1 -qpn 0x000123 -psn 0x00abcd -want-gid ::ffff:198.18.1.2; then
		rc=$(host_wait tap.host-client 40)
	else
		rc="not started"
	fi
	sleep 1 # the server prints its remote address line, then waits for SENDs
	stop "$spid"
	wait "$spid"
	if grep -q 'remote address: LID 0x0000, QPN 0x000123, PSN 0x00abcd, GID ::ffff:198.18.1.1' /out/logs/tap.server.txt; then
		result tap.rc_pingpong_server PASS "$t0" "$(grep 'remote address' /out/logs/tap.server.txt | sed 's/^ *//')"
	else
		result tap.rc_pingpong_server FAIL "$t0" "no remote address line: $(tail -1 /out/logs/tap.server.txt)"
	fi
	if [ "$rc" = 0 ]; then
		result tap.host_ppexch_connect PASS "$t0" "$(grep 'remote address' /out/logs/tap.host-client.txt | sed 's/^ *//')"
	else
		result tap.host_ppexch_connect FAIL "$t0" "exit $rc: $(tail -1 /out/logs/tap.host-client.txt 2>/dev/null)"
	fi

	t0=$(now)
	host_start tap.host-server 60 ppexch -listen 198.18.1.1:18515 \
		-gid ::ffff:198.18.1.1 -qpn 0x000456 -psn 0x00cdef -want-gid ::ffff:198.18.1.2
	# -n 5: the client sends its first SEND after the exchange, then waits.
	timeout -s KILL 60 stdbuf -oL ibv_rc_pingpong -d rxetap -g 1 -n 5 -s 64 198.18.1.1 >/out/logs/tap.client.txt 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		grep -q 'remote address' /out/logs/tap.client.txt && break
		if ! kill -0 "$spid" 2>/dev/null; then # refused: the host did not listen yet
			sleep 0.3
			timeout -s KILL 60 stdbuf -oL ibv_rc_pingpong -d rxetap -g 1 -n 5 -s 64 198.18.1.1 >/out/logs/tap.client.txt 2>&1 &
			spid=$!
		fi
		sleep 0.1
	done
	sleep 2 # rxe sends the SEND and retransmits it
	stop "$spid"
	wait "$spid"
	rc=$(host_wait tap.host-server 10)
	if grep -q 'remote address: LID 0x0000, QPN 0x000456, PSN 0x00cdef, GID ::ffff:198.18.1.1' /out/logs/tap.client.txt; then
		result tap.rc_pingpong_client PASS "$t0" "$(grep 'remote address' /out/logs/tap.client.txt | sed 's/^ *//'); SENDs left for the host"
	else
		result tap.rc_pingpong_client FAIL "$t0" "no remote address line: $(tail -1 /out/logs/tap.client.txt)"
	fi
	if [ "$rc" = 0 ]; then
		result tap.host_ppexch_listen PASS "$t0" "$(grep 'remote address' /out/logs/tap.host-server.txt | sed 's/^ *//')"
	else
		result tap.host_ppexch_listen FAIL "$t0" "exit $rc: $(tail -1 /out/logs/tap.host-server.txt 2>/dev/null)"
	fi
}

# --- xroce: the RoCE half, xroce on the host against rxe in the guest ----------------

# last_ack_lost NAME TOOL_EXIT XROCE_LOG W0: whether an xloss row failed only
# the way lossy runs of these tools must sometimes end (rule last_ack_lost);
# LAST_ACK_EV then says what the capture shows. netem drops the ACK of
# xroce's last message; the guest's tool has everything it waits for (it
# exits 0 only after receiving every message of xroce's, contents checked
# where the row passes -c), destroys its QP and exits; xroce's
# retransmissions then reach no QP and its last completion never comes (a
# real ibv_rc_pingpong in xroce's place would wait the same way). The tool's
# exit 0 proves the data went through; xroce's only complaint must be the
# missing completion, and the capture since the row began (W0) must show that
# race: xroce resending its last message and no ACK of the guest's for it on
# the wire (last_ack_wire).
last_ack_lost() {
	LAST_ACK_EV=""
	[[ $1 == xloss.* ]] && [ "$2" = 0 ] || return 1
	[ "$(grep -v '^ *$' "$3" 2>/dev/null | tail -1 | grep -c 'no completion for')" = 1 ] || return 1
	LAST_ACK_EV=$(last_ack_wire "$4" "$XROCE_PCAP")
}
LAST_ACK_NOTE="all data through; the ACK of xroce's last message was lost after rxe's tool had exited (the tools' race at the end of a lossy run)"

# last_ack_wire W0 PCAP: prints what the capture PCAP (the guest's eth0,
# after netem: rxe's frames that netem dropped are not in it) shows of the
# end of the row that began at W0 ($EPOCHREALTIME), and succeeds when it
# shows the last ACK lost: the last RC request of xroce's (198.18.1.1 to the
# guest, not an ACK, read response or atomic ACK, not QP 1) went to QP Q
# with PSN R, the restart point xroce was resending; Q's highest PSN since
# W0 is H (24-bit, counted from Q's first PSN in the row). R was sent at
# least twice, and no ACK, atomic ACK or read response of the guest's
# carries a PSN from R to H (an ACK of any of them would have moved xroce
# on). R is H when the last message is one packet; a longer one is resent
# from its first unacknowledged packet, one at a time after the ACK timeout
# (qp/budget.go's recovery), so H itself may be on the wire once. xroce
# dump lists the packets (times relative to
# the capture's first frame, whose epoch time tcpdump gives); it reads the
# capture while tcpdump still writes it (-U), a frame cut at the end is left
# out.
last_ack_wire() {
	local w0=$1 pcap=$2 t1
	t1=$(tcpdump -r "$pcap" -tt -n -c 1 2>/dev/null | awk '{ print $1; exit }')
	[ -n "$t1" ] || { echo "no capture $pcap to check"; return 1; }
	/out/xroce dump -no-summary "$pcap" 2>/dev/null | awk -v r0="$(awk -v a="$w0" -v b="$t1" 'BEGIN { printf "%.6f", a - b }')" '
		$2 + 0 < r0 { next }
		{ op = ""; q = ""; p = ""
		  for (i = 6; i < NF; i++) if ($i == "QP") { op = $(i - 1); q = $(i + 1) } else if ($i == "PSN") { p = $(i + 1) + 0; break } }
		p == "" || $6 != "RC" { next }
		$3 == "198.18.1.1" && $5 == "198.18.1.2" && q != "0x000001" && op !~ /ACKNOWLEDGE|RESPONSE/ {
			if (!(q in base)) base[q] = p
			d = (p - base[q] + 16777216) % 16777216
			if (!(q in hid) || d > hid[q]) { hid[q] = d; hi[q] = p }
			sent[q, p]++; last = q; lastp = p; nreq++
			next }
		$3 == "198.18.1.2" && $5 == "198.18.1.1" && op ~ /ACKNOWLEDGE|READ_RESPONSE/ { ans[p]++; nans++ }
		END {
			if (last == "") { print "no RC request of xroce\047s in the capture since the row began"; exit 1 }
			h = hi[last]; r = lastp; n = (h - r + 16777216) % 16777216
			if (n > 4096) n = -1 # R beyond H: not a resend of the last message
			acked = 0
			for (i = 0; i <= n; i++) acked += ans[(r + i) % 16777216]
			printf "xroce\047s last request (QP %s PSN %d, 0x%06x) is on the wire %d times, its last frame (PSN %d, 0x%06x, where it resumed) %d times, and the guest\047s ACKs of PSNs from there to the last %d (%d requests of xroce\047s, %d ACKs and responses of the guest\047s since the row began)", last, h, h, sent[last, h], r, r, sent[last, r], acked, nreq, nans + 0
			exit !(n >= 0 && sent[last, r] >= 2 && !acked) }'
}

# vs_host NAME TIMEOUT GUEST_SERVER... -- HOST_CLIENT...: a tool's server in
# the guest, the host's xroce as its client (HOST_CLIENT are xroce's arguments).
vs_host_client() { rowrun _vs_host_client "$@"; }
_vs_host_client() {
	local name=$1 to=$2 t0 w0 srv=() spid src hrc
	shift 2
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	t0=$(now)
	w0=$EPOCHREALTIME
	timeout -s KILL "$to" stdbuf -oL "${srv[@]}" >"/out/logs/$name.guest-server.txt" 2>&1 &
	spid=$!
	if wait_listen 18515 && host_start "$name.host-client" "$to" xroce "$@"; then
		hrc=$(host_wait "$name.host-client" "$to")
		[ "$hrc" != 0 ] && kill -0 "$spid" 2>/dev/null && rxe_snapshot "/out/logs/$name.rxe-stall.txt"
	else
		hrc="not started"
	fi
	# The server ends with the client, or soon after.
	for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	stop "$spid"
	wait "$spid"
	src=$?
	if [ "$src" = 0 ] && [ "$hrc" = 0 ]; then
		result "$name" PASS "$t0" "rxe: $(detail "/out/logs/$name.guest-server.txt"); xroce: $(detail "/out/logs/$name.host-client.txt")"
	elif last_ack_lost "$name" "$src" "/out/logs/$name.host-client.txt" "$w0"; then
		result "$name" PASS "$t0" "by rule last_ack_lost: rxe: $(detail "/out/logs/$name.guest-server.txt"); $LAST_ACK_NOTE; $LAST_ACK_EV"
	else
		result "$name" FAIL "$t0" "rxe server exit $src, xroce client exit $hrc: $(grep -v '^ *$' "/out/logs/$name.host-client.txt" 2>/dev/null | tail -1 | cut -c1-100)${LAST_ACK_EV:+; not the lost last ACK: $LAST_ACK_EV}"
	fi
}

# vs_host_server NAME TIMEOUT GUEST_CLIENT... -- HOST_SERVER...: xroce's
# server on the host, a tool's client in the guest.
vs_host_server() { rowrun _vs_host_server "$@"; }
_vs_host_server() {
	local name=$1 to=$2 t0 w0 cli=() crc hrc
	shift 2
	while [ "$1" != "--" ]; do cli+=("$1"); shift; done
	shift
	t0=$(now)
	w0=$EPOCHREALTIME
	[ "${XROCE_RXE_TRACE:-0}" = 1 ] && echo >/sys/kernel/tracing/trace
	if host_start "$name.host-server" "$to" xroce "$@"; then
		crc=$(client_vs_host "$name.host-server" "/out/logs/$name.guest-client.txt" "$to" "${cli[@]}")
		hrc=$(host_wait "$name.host-server" "$to")
	else
		crc="not run" hrc="not started"
	fi
	if [ "$crc" = 0 ] && [ "$hrc" = 0 ]; then
		result "$name" PASS "$t0" "rxe: $(detail "/out/logs/$name.guest-client.txt"); xroce: $(detail "/out/logs/$name.host-server.txt")"
	elif last_ack_lost "$name" "$crc" "/out/logs/$name.host-server.txt" "$w0"; then
		result "$name" PASS "$t0" "by rule last_ack_lost: rxe: $(detail "/out/logs/$name.guest-client.txt"); $LAST_ACK_NOTE; $LAST_ACK_EV"
	else
		result "$name" FAIL "$t0" "rxe client exit $crc, xroce server exit $hrc: $(grep -v '^ *$' "/out/logs/$name.host-server.txt" 2>/dev/null | tail -1 | cut -c1-100)${LAST_ACK_EV:+; not the lost last ACK: $LAST_ACK_EV}"
	fi
}

# mode_xroce: `xroce pingpong` on the host's tap0 against rdma-core's
# ibv_rc_pingpong and ibv_ud_pingpong in the guest, data checked (-c), and
# `xroce perf` against perftest's ib_*_bw and ib_*_lat, both roles, captured on
# the guest's eth0. Skipped while xroce has no pingpong.
# XROCE_TIMEOUT (kernel parameter) bounds each tool run, default 120 s.
# xroce_suite PREFIX LOSSY: the runs of mode_xroce, rows named PREFIX.*.
xroce_suite() {
	local p=$1 lossy=$2 t0 s
	tap_link
	t0=$(now)
	if ! /out/xroce help 2>&1 | grep -qw pingpong; then
		result "$p.pingpong" SKIP "$t0" "this xroce has no pingpong subcommand yet"
		touch "/out/pcap/$p.skipped"
		return 1
	fi
	# Under loss -U: each frame is written at once, so that last_ack_wire
	# can read the capture of a row that has just ended.
	XROCE_PCAP=/tmp/$p.pcap
	# shellcheck disable=SC2046 # no word or one
	tcpdump $([ "$lossy" = 1 ] && echo -U) -i eth0 -s 0 -B 65536 -w "$XROCE_PCAP" udp port 4791 2>"/out/logs/$p.tcpdump.txt" &
	TCPDUMP=$!
	for _ in $(seq 50); do grep -q 'listening on' "/out/logs/$p.tcpdump.txt" && break; sleep 0.1; done
	local to=${XROCE_TIMEOUT:-120}
	# xroce pingpong runs with -e (it sleeps on completion events): polling,
	# as ibv_rc_pingpong does, would take a host core from the emulated
	# guest on a small machine.
	# RC at IB MTU 1024 and 4096 (eth0 and tap0 have MTU 9000, so that
	# rxe's active MTU is 4096), 1 B to 1 MiB, both roles, data checked.
	local m n t
	for m in 1024 4096; do
		for s in 1 13 1024 4097 65536 1048576; do
			n=50
			[ "$s" -ge 1048576 ] && n=10
			vs_host_client "$p.rc.m$m.s$s.xroce_client" "$to" ibv_rc_pingpong -d rxetap -g 1 -m $m -s "$s" -n $n -c -- \
				pingpong -e -d tap0 -m $m -s "$s" -n $n -c 198.18.1.2
			vs_host_server "$p.rc.m$m.s$s.xroce_server" "$to" ibv_rc_pingpong -d rxetap -g 1 -m $m -s "$s" -n $n -c 198.18.1.1 -- \
				pingpong -e -d tap0 -m $m -s "$s" -n $n -c
		done
	done
	# ibv_srq_pingpong: 4 RC QPs on one shared receive queue.
	vs_host_client "$p.srq.xroce_client" "$to" ibv_srq_pingpong -d rxetap -g 1 -m 1024 -q 4 -s 4097 -n 50 -c -- \
		pingpong -e --srq -q 4 -d tap0 -m 1024 -s 4097 -n 50 -c 198.18.1.2
	vs_host_server "$p.srq.xroce_server" "$to" ibv_srq_pingpong -d rxetap -g 1 -m 1024 -q 4 -s 4097 -n 50 -c 198.18.1.1 -- \
		pingpong -e --srq -q 4 -d tap0 -m 1024 -s 4097 -n 50 -c
	if [ "$lossy" = 1 ]; then
		result "$p.uc" SKIP "$(now)" "UC is unreliable: uc_pingpong waits forever for a message with a lost packet"
		result "$p.ud" SKIP "$(now)" "UD is unreliable: ud_pingpong waits forever for a lost packet"
	else
		for m in 1024 4096; do
			vs_host_client "$p.uc.m$m.xroce_client" "$to" ibv_uc_pingpong -d rxetap -g 1 -m $m -s 65536 -n 50 -c -- \
				pingpong -e --uc -d tap0 -m $m -s 65536 -n 50 -c 198.18.1.2
			vs_host_server "$p.uc.m$m.xroce_server" "$to" ibv_uc_pingpong -d rxetap -g 1 -m $m -s 65536 -n 50 -c 198.18.1.1 -- \
				pingpong -e --uc -d tap0 -m $m -s 65536 -n 50 -c
		done
		vs_host_client "$p.ud.xroce_client" "$to" ibv_ud_pingpong -d rxetap -g 1 -s 1000 -n 50 -c -- \
			pingpong -e --ud -d tap0 -s 1000 -n 50 -c 198.18.1.2
		vs_host_server "$p.ud.xroce_server" "$to" ibv_ud_pingpong -d rxetap -g 1 -s 1000 -n 50 -c 198.18.1.1 -- \
			pingpong -e --ud -d tap0 -s 1000 -n 50 -c
	fi
	# perftest against `xroce perf`, both roles, at the port's MTU (4096);
	# RC, and UC for write_bw and send_bw.
	local c
	for t in write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat write_bw.UC send_bw.UC; do
		c=RC
		[ "${t#*.}" != "$t" ] && c=${t#*.} t=${t%.*}
		n=100
		[ "${t#*_}" = lat ] && n=200
		if [ "$lossy" = 1 ] && [ "$c.$t" = UC.send_bw ]; then
			result "$p.perf.$t.uc" SKIP "$(now)" "UC is unreliable: ib_send_bw's server waits forever for a lost message"
		elif /out/xroce help perf 2>&1 | grep -qw "$t"; then
			local sfx="" ca=()
			[ $c = UC ] && sfx=.uc ca=(-c UC)
			if [ "$c.$t" = UC.send_bw ] && ! /out/xroce perf send_bw -h 2>&1 | grep -q -- -rate_limit; then
				# Unpaced, xroce sends 100 x 64 KiB at once, faster than
				# the TCG guest takes them from its ring: UC loses
				# messages and ib_send_bw's server waits for them forever.
				result "$p.perf.$t$sfx.xroce_client" SKIP "$(now)" "UC: this xroce has no --rate_limit, and its burst outruns the emulated guest's receive ring"
			elif [ "$c.$t" = UC.send_bw ]; then
				# Paced at 5 MiB/s of payload, one message at a time
				# (perftest's rate limiter flags), below the 12-20 MB/s
				# the guest's rxe takes 64 KiB messages at.
				vs_host_client "$p.perf.$t$sfx.xroce_client" "$to" "ib_$t" -d rxetap -x 1 -F "${ca[@]}" -n $n -- \
					perf "$t" -d tap0 -F "${ca[@]}" -n $n --rate_limit 5 --rate_units M --burst_size 1 198.18.1.2
			else
				vs_host_client "$p.perf.$t$sfx.xroce_client" "$to" "ib_$t" -d rxetap -x 1 -F "${ca[@]}" -n $n -- \
					perf "$t" -d tap0 -F "${ca[@]}" -n $n 198.18.1.2
			fi
			vs_host_server "$p.perf.$t$sfx.xroce_server" "$to" "ib_$t" -d rxetap -x 1 -F "${ca[@]}" -n $n 198.18.1.1 -- \
				perf "$t" -d tap0 -F "${ca[@]}" -n $n
		else
			result "$p.perf.$t" SKIP "$(now)" "this xroce has no perf $t"
		fi
	done
	# Congestion control: xroce's CNPs towards rxe, and two xroce ends
	# through a router that marks ECN (not under loss: the rows are about
	# marks, not drops).
	if [ "$lossy" = 0 ]; then
		if /out/xroce perf write_bw -h 2>&1 | grep -q -- -mark-ce; then
			cc_rxe "$p.cc.rxe_write_bw" write_bw
			cc_rxe "$p.cc.rxe_send_bw" send_bw
			cc_router "$p.cc.router_write_bw"
		else
			result "$p.cc" SKIP "$(now)" "this xroce has no perf --mark-ce"
		fi
	fi
	t0=$(now)
	sleep 0.5
	kill -INT "$TCPDUMP"
	wait "$TCPDUMP"
	cp "/tmp/$p.pcap" "/out/pcap/$p.pcap"
	rm -f "/tmp/$p.pcap"
	result "$p.tcpdump" PASS "$t0" "$(grep -E 'captured|dropped' "/out/logs/$p.tcpdump.txt" | paste -sd' ')"
}

# --- cc: congestion control on real kernels ------------------------------------
# cc_netns: two xroce ends through a router namespace whose egress marks ECN.
# The sender in cs (cs0 198.18.3.2), the router in cr (cr0 198.18.3.1 towards
# cs, cr1 198.18.4.1 towards cd), the receiver in cd (cd0 198.18.4.2). On cr1,
# htb holds the link to CC_RATE so that a queue forms, and fq_codel marks CE
# on every ECN-capable frame that waited longer than 1 ms (ce_threshold, at
# dequeue, as a switch marks on its queue). One queue per veth so that xroce
# gets AF_XDP (it needs a socket on every queue).
CC_RATE=100mbit
cc_netns() {
	[ -e /run/netns/cr ] && return 0
	modprobe -a veth sch_htb sch_fq_codel
	local n
	for n in cs cr cd; do
		ip netns add $n
		ip -n $n link set lo up
	done
	ip link add cs0 numtxqueues 1 numrxqueues 1 type veth peer name cr0 numtxqueues 1 numrxqueues 1
	ip link add cd0 numtxqueues 1 numrxqueues 1 type veth peer name cr1 numtxqueues 1 numrxqueues 1
	ip link set cs0 netns cs
	ip link set cd0 netns cd
	ip link set cr0 netns cr
	ip link set cr1 netns cr
	ip -n cs addr add 198.18.3.2/24 dev cs0
	ip -n cr addr add 198.18.3.1/24 dev cr0
	ip -n cr addr add 198.18.4.1/24 dev cr1
	ip -n cd addr add 198.18.4.2/24 dev cd0
	for n in cs:cs0 cr:cr0 cr:cr1 cd:cd0; do ip -n "${n%:*}" link set "${n#*:}" up; done
	ip netns exec cr sysctl -qw net.ipv4.ip_forward=1
	ip -n cs route add default via 198.18.3.1
	ip -n cd route add default via 198.18.4.1
	ip -n cs neigh replace 198.18.3.1 lladdr "$(ip netns exec cr cat /sys/class/net/cr0/address)" dev cs0 nud permanent
	ip -n cd neigh replace 198.18.4.1 lladdr "$(ip netns exec cr cat /sys/class/net/cr1/address)" dev cd0 nud permanent
	ip -n cr neigh replace 198.18.3.2 lladdr "$(ip netns exec cs cat /sys/class/net/cs0/address)" dev cr0 nud permanent
	ip -n cr neigh replace 198.18.4.2 lladdr "$(ip netns exec cd cat /sys/class/net/cd0/address)" dev cr1 nud permanent
	tc -n cr qdisc add dev cr1 root handle 1: htb default 1
	tc -n cr class add dev cr1 parent 1: classid 1:1 htb rate $CC_RATE
	tc -n cr qdisc add dev cr1 parent 1:1 handle 10: fq_codel ecn ce_threshold 1ms
}

# cc_fig LOG FIELD: FIELD's value on xroce perf's "congestion control" line.
cc_fig() {
	awk -v f="$2" '/^perf: congestion control:/ { for (i = 1; i < NF; i++) if ($i == f) { print $(i + 1); exit } }' "$1" 2>/dev/null
}

# cc_router NAME: xroce perf write_bw from cs to cd through the marking router,
# then xroce rping -V (contents checked) the same way. PASS when both
# complete, CE marks reached the receiver, which sent CNPs, and the sender
# received them and DCQCN cut its rate below the line rate. The router's
# capture goes to pcap/xroce-cc.pcap (the host checks it).
cc_router() { rowrun _cc_router "$@"; }
_cc_router() {
	local name=$1 to=${XROCE_TIMEOUT:-120} t0 spid src crc prc why="" n=300 line=100000000000 l
	t0=$(now)
	cc_netns
	ip netns exec cr tcpdump -i cr1 -s 0 -B 65536 -w /tmp/xroce-cc.pcap udp port 4791 2>"/out/logs/$name.tcpdump.txt" &
	local tpid=$!
	for _ in $(seq 50); do grep -q 'listening on' "/out/logs/$name.tcpdump.txt" && break; sleep 0.1; done
	ip netns exec cd timeout -s KILL "$to" /out/xroce perf write_bw -d cd0 -F -n $n >"/out/logs/$name.server.txt" 2>&1 &
	spid=$!
	netns_wait_listen cd "$spid"
	ip netns exec cs timeout -s KILL "$to" /out/xroce perf write_bw -d cs0 -F -n $n 198.18.4.2 >"/out/logs/$name.client.txt" 2>&1
	crc=$?
	for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	stop "$spid"
	wait "$spid"
	src=$?
	# The same path, contents checked: rping -V, whose server READs 65000
	# bytes from the client (the READ responses cross the router towards
	# the server, as the WRITEs did) and WRITEs them back, and whose client
	# compares them. (xroce pingpong, like ibv_rc_pingpong, sends with hop
	# limit 1: the router would drop it.) The server has no socket to wait
	# for: the client tries again while it is refused.
	ip netns exec cd timeout -s KILL "$to" /out/xroce rping -s -a 198.18.4.2 -C 50 -S 65000 -V >"/out/logs/$name.rping-server.txt" 2>&1 &
	spid=$!
	for _ in 1 2 3 4 5; do
		sleep 2
		ip netns exec cs timeout -s KILL "$to" /out/xroce rping -c -a 198.18.4.2 -C 50 -S 65000 -V >"/out/logs/$name.rping-client.txt" 2>&1
		prc=$?
		[ $prc = 0 ] || ! kill -0 "$spid" 2>/dev/null || ! grep -qi 'reject\|refused' "/out/logs/$name.rping-client.txt" && break
	done
	for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	stop "$spid"
	wait "$spid"
	prc="$prc/$?"
	sleep 0.5
	kill -INT "$tpid"
	wait "$tpid"
	cp /tmp/xroce-cc.pcap /out/pcap/xroce-cc.pcap
	rm -f /tmp/xroce-cc.pcap
	tc -n cr -s qdisc show dev cr1 >"/out/logs/$name.qdisc.txt"
	local sv=/out/logs/$name.server.txt cl=/out/logs/$name.client.txt ce cnp rx cuts low marks
	ce=$(cc_fig $sv rx_ce) cnp=$(cc_fig $sv tx_cnp) rx=$(cc_fig $cl rx_cnp) cuts=$(cc_fig $cl rate_cuts) low=$(cc_fig $cl rate_lowest)
	marks=$(awk '{ for (i = 1; i < NF; i++) if ($i == "ce_mark") { m += $(i + 1); f = 1 } } END { if (f) print m }' "/out/logs/$name.qdisc.txt")
	[ "$crc/$src" = 0/0 ] || why="$why perf client exit $crc, server exit $src;"
	[ "$prc" = 0/0 ] || why="$why rping -V client/server exit $prc: $(grep -v '^ *$' "/out/logs/$name.rping-client.txt" | tail -1 | cut -c1-80);"
	[ "${ce:-0}" -gt 0 ] || why="$why no CE-marked frame reached the receiver;"
	[ "${cnp:-0}" -gt 0 ] || why="$why the receiver sent no CNP;"
	[ "${rx:-0}" -gt 0 ] || why="$why the sender received no CNP;"
	[ "${cuts:-0}" -gt 0 ] || why="$why no rate cut;"
	[ "${low:-0}" -gt 0 ] && [ "${low:-0}" -lt $line ] || why="$why the sender's rate never fell below the line rate;"
	l="router htb $CC_RATE + fq_codel ce_threshold 1ms: ${marks:-?} CE marks; receiver rx_ce $ce tx_cnp $cnp; sender rx_cnp $rx rate_cuts $cuts, lowest rate $(awk -v b="${low:-0}" 'BEGIN { printf "%.1f Mb/s", b / 1e6 }'); perf $(detail "$cl"); rping -V: 50 x 65000 B read, written back and compared"
	if [ -z "$why" ]; then
		result "$name" PASS "$t0" "$l"
	else
		result "$name" FAIL "$t0" "${why# } -- $l"
	fi
}

# cc_rxe NAME TEST: rxe's perftest client (the requester) against xroce
# perf --mark-ce 0.1 on the host, whose XDP program marks a tenth of rxe's
# ECN-capable frames CE on the way in. rxe sends the traffic class as its
# TOS byte, Not-ECT by default (which a switch does not mark): the client
# asks for --tclass 106 (DSCP 26 and ECT(0), how ConnectX deployments set
# RoCE's class). xroce answers with CNPs, which rxe drops (it has no
# CNP opcode). PASS when the run passes (vs_host_server's row) and xroce
# sent CNPs; the detail shows which of rxe's counters moved.
cc_rxe() { rowrun _cc_rxe "$@"; }
_cc_rxe() {
	local name=$1 t=$2 to=${XROCE_TIMEOUT:-120} t0 b a cnp ce moved
	t0=$(now)
	b=$(grep -H . /sys/class/infiniband/rxetap/ports/1/hw_counters/* 2>/dev/null | sed 's|.*/||')
	_vs_host_server "$name" "$to" "ib_$t" -d rxetap -x 1 -F -n 200 --tclass 106 198.18.1.1 -- perf "$t" -d tap0 -F -n 200 --mark-ce 0.1
	a=$(grep -H . /sys/class/infiniband/rxetap/ports/1/hw_counters/* 2>/dev/null | sed 's|.*/||')
	moved=$(join -t: <(sort <<<"$b") <(sort <<<"$a") | awk -F: '$3 != $2 { printf "%s %+d, ", $1, $3 - $2 }')
	cnp=$(cc_fig "/out/logs/$name.host-server.txt" tx_cnp)
	ce=$(cc_fig "/out/logs/$name.host-server.txt" rx_ce)
	if [ "${cnp:-0}" -gt 0 ]; then
		result "$name.cnps" PASS "$t0" "xroce got ${ce:-?} CE-marked frames of rxe's and sent rxe $cnp CNPs; rxe's counters: ${moved%, }"
	else
		result "$name.cnps" FAIL "$t0" "xroce sent no CNP (rx_ce ${ce:-?}): $(grep 'congestion control' "/out/logs/$name.host-server.txt" | cut -c1-150)"
	fi
}

mode_xroce() {
	xroce_suite xroce 0
}

# mode_xloss: mode_xroce's runs with netem dropping 1% of the guest's eth0
# egress (rxe's frames to xroce; the host kernel has no netem), UD skipped.
mode_xloss() {
	local drops
	tap_link
	tc qdisc replace dev eth0 root netem loss 1%
	result xloss.setup PASS "$(now)" "netem loss 1% on the guest's eth0 egress (rxe to xroce)"
	xroce_suite xloss 1
	tc -s qdisc show dev eth0 >/out/logs/xloss.netem.txt
	tc qdisc del dev eth0 root
	[ -e /out/pcap/xloss.skipped ] && return
	drops=$(awk '/dropped/ { gsub(/[(),]/, ""); for (i = 1; i <= NF; i++) if ($i == "dropped") d += $(i+1) } END { print d + 0 }' /out/logs/xloss.netem.txt)
	if [ "$drops" -gt 0 ]; then
		result xloss.netem_drops PASS "$(now)" "$drops packets dropped by netem"
	else
		result xloss.netem_drops FAIL "$(now)" "netem dropped nothing"
	fi
}

# --- cm: RDMA CM (rdma_cm over QP 1) between xroce and rxe --------------------------
# rdmacm-utils (rdma_server/rdma_client, ucmatose, rping, udaddy) and perftest
# -R in the guest against the same commands of xroce on the host, on the tap link,
# both roles: in a "xroce_client" row the guest's tool is passive (it listens
# with rdma_listen) and xroce connects to it; in a "xroce_server" row xroce
# listens and the guest's tool connects. Every row also leaves, for the
# host's check of its CM MADs (interop/run check_cm), a line in
# /out/cm-windows.tsv: NAME, start and end (the guest's clock, as tcpdump's
# timestamps), result, the number of connections it makes, rxe's CM
# counters that moved and the row's phases. See interop/README.md, "RDMA CM".

CM_XROCE=198.18.1.1
CM_RXE=198.18.1.2
# Seconds one side may keep running after the other has ended: rxe's tool
# CM_GRACE, xroce's CM_HOST_GRACE, past the 30 s after which xroce's clones
# give up on a silent peer (rdmacm.PeerTimeout), so that a row where the
# peer's last word was lost (see cm_race) ends as xroce ends it, not by a
# stop.
CM_GRACE=15
CM_HOST_GRACE=40

# cm_setup: the tap link, librdmacm's kernel half, and the kernel CM's
# tracepoints (what rxe's CM sent, received, resent and dropped), saved per
# row to logs/NAME.cm-trace.txt.
cm_setup() {
	tap_link
	[ -n "${NAPFD:-}" ] || exec {NAPFD}<> <(:)
	mkdir -p /out/host
	modprobe -a ib_cm rdma_cm rdma_ucm
	mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
	local e
	for e in ib_cma rdma_cma; do
		[ -e "/sys/kernel/tracing/events/$e/enable" ] && echo 1 >"/sys/kernel/tracing/events/$e/enable"
	done
	[ -e /dev/infiniband/rdma_cm ]
}

# The rows' own bookkeeping avoids forks where it can: a fork and exec
# costs tens of milliseconds in the emulated guest, and a row's tools run
# for less than a second.
# nap SECONDS: sleep without a fork (a read that times out on a pipe that
# never gets data).
nap() {
	[ -n "${NAPFD:-}" ] || exec {NAPFD}<> <(:)
	read -rt "$1" -u "$NAPFD"
}

# cm_counters: rxe's CM counters (ib_cm's, per port), "PATH:VALUE" a line.
cm_counters() {
	grep -H . /sys/class/infiniband/rxetap/ports/1/cm_{tx_msgs,tx_retries,rx_msgs,rx_duplicates}/* 2>/dev/null
}

# cm_counter_moves BEFORE AFTER: the counters that moved, compactly:
# "tx req 1 rtu 1 drep 1; retries rep 1; rx rep 1 dreq 1; dup req 1".
cm_counter_moves() {
	awk -F: 'NR == FNR { b[$1] = $2; next }
		{ d = $2 - b[$1]; if (d <= 0) next
		  m = split($1, k, "/"); g = k[m - 1]; k[2] = k[m]; sub(/^cm_/, "", g); sub(/_msgs$/, "", g); sub(/^tx_/, "", g); sub(/^rx_duplicates$/, "dup", g)
		  if (!(g in seen)) { seen[g] = 1; order[++n] = g }
		  s[g] = s[g] " " k[2] " " d }
		END { for (i = 1; i <= n; i++) printf "%s%s%s", (i > 1 ? "; " : ""), order[i], s[order[i]] }' "$1" "$2"
}

# cm_wait_listen PORT PID: until an rdma_cm id listens on PORT (10 s at
# most; not if PID, the listening tool, has ended).
cm_wait_listen() {
	local i
	for ((i = 0; i < 200; i++)); do
		rdma res show cm_id 2>/dev/null | grep -qE "LISTEN.*:$1( |\$)" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		nap 0.05
	done
	return 1
}

# cm_host_start NAME TIMEOUT PROG ARGS...: host_start with fewer forks.
cm_host_start() {
	local name=$1 i
	shift
	[ -e "/out/host/$name.rc" ] && rm -f "/out/host/$name.rc"
	printf '%s\n' "$@" >"/out/host/$name.tmp" && mv "/out/host/$name.tmp" "/out/host/$name.cmd"
	for ((i = 0; i < 200; i++)); do
		[ -e "/out/host/$name.started" ] && return 0
		nap 0.05
	done
	return 1
}

# cm_snapshot FILE: rxe's view of a row that did not end: its rdma_cm ids and
# QPs (PSNs), CM counters and the kernel's last messages.
cm_snapshot() {
	{
		date +%T.%N
		echo "== rdma res show cm_id"
		rdma res show cm_id 2>&1
		echo "== rdma res show qp"
		rdma res show qp 2>&1
		echo "== ib_cm counters"
		cm_counters
		echo "== tools"
		pgrep -a '^(rping|ucmatose|rdma_server|rdma_client|ib_)' 2>&1
		echo "== dmesg"
		dmesg | tail -30
	} >>"$1" 2>&1
}

# host_stop NAME: asks the host to stop its program NAME (TERM); see
# serve_requests in interop/run.
host_stop() {
	: >"/out/host/$1.stop"
}

# cm_wait HOST GPID GLOG RETRY: waits for the guest's tool (GPID, a
# `timeout ... TOOL &` writing GLOG) and the host's xroce (HOST); once one
# has ended, the other gets CM_GRACE seconds (xroce CM_HOST_GRACE), then is
# stopped (rxe's state first saved to logs/ROW.cm-stuck.txt). With RETRY (a
# pattern), returns at once with CM_RETRY=1 when the guest's tool ended with
# a line matching it (a connection refused: nothing listened yet) while
# xroce still runs. Sets CM_GRC and CM_HRC, the exit statuses, and
# CM_STOPPED to the grace after which one was stopped.
cm_wait() {
	local host=$1 gpid=$2 log=$3 retry=$4 gdone=0 hdone=0 i=0 since=-1 stopped=0 grace
	CM_RETRY=0
	while :; do
		kill -0 "$gpid" 2>/dev/null || gdone=1
		[ -s "/out/host/$host.rc" ] && hdone=1
		[ $gdone = 1 ] && [ $hdone = 1 ] && break
		if [ $gdone = 1 ] && [ -n "$retry" ] && grep -qE "$retry" "$log"; then
			CM_RETRY=1
			break
		fi
		# rxe's view 3 s into the row (PSNs of its QPs, cm_ids), for
		# a row that then stalls.
		[ $i = 30 ] && [ $gdone = 0 ] && [ $hdone = 0 ] && cm_snapshot "/out/logs/${host%.host-*}.cm-3s.txt"
		if [ $gdone = 1 ] || [ $hdone = 1 ]; then
			[ $since -lt 0 ] && since=$i
			grace=$CM_GRACE
			[ $hdone = 0 ] && grace=$CM_HOST_GRACE
			if [ $stopped = 0 ] && [ $((i - since)) -ge $((grace * 10)) ]; then
				stopped=1
				cm_snapshot "/out/logs/${host%.host-*}.cm-stuck.txt"
				if [ $gdone = 0 ]; then
					echo "== the guest's tool still ran ${CM_GRACE}s after xroce ended: stopped" >>"/out/logs/${host%.host-*}.cm-stuck.txt"
					stop "$gpid"
				else
					echo "== xroce still ran ${CM_HOST_GRACE}s after the guest's tool ended: stopped" >>"/out/logs/${host%.host-*}.cm-stuck.txt"
					host_stop "$host"
				fi
			fi
		fi
		i=$((i + 1))
		nap 0.1
	done
	wait "$gpid"
	CM_GRC=$?
	CM_HRC=$(cat "/out/host/$host.rc" 2>/dev/null)
	[ $stopped = 1 ] && CM_STOPPED=$grace
	return 0
}

# What a tool of librdmacm prints when nothing listens on the port yet (a
# REJ, reason 8 "invalid service ID"): rping, ucmatose, rdma_client
# (rdma_connect: ECONNREFUSED), perftest.
CM_REFUSED='(REJECTED, error:? 8|UNREACHABLE, error:? 1)$|rdma_connect: Connection refused|Unexpected CM event bl blka 8|Unable to init the socket connection|^rconnect: Connection refused'

# cm_row NAME ROLE CONNS PORT CHECK GUEST_TOOL... -- XROCE_ARGS...: one row.
# ROLE xroce_client: GUEST_TOOL listens on PORT, then the host runs xroce
# XROCE_ARGS to connect to it; ROLE xroce_server: the host runs xroce first,
# then GUEST_TOOL connects, again while it is refused (xroce may not listen
# yet). CONNS: the connections the row makes (for the host's MAD check).
# CHECK: a command run as CHECK CLIENT_LOG SERVER_LOG after both ended 0; it
# prints what is wrong, nothing when all is right. PASS when both exit 0 and
# CHECK is content.
cm_row() { rowrun _cm_row "$@"; }
_cm_row() {
	local name=$1 role=$2 conns=$3 port=$4 chk=$5 to=${XROCE_TIMEOUT:-120} t0 w0 tool=() host rlog xlog
	local tries=0 why="" c0 c1 moves st detail clog slog
	shift 5
	while [ "$1" != "--" ]; do tool+=("$1"); shift; done
	shift
	t0=$(now)
	w0=$EPOCHREALTIME
	c0=/tmp/cm.counters0 c1=/tmp/cm.counters1
	cm_counters >"$c0"
	echo >/sys/kernel/tracing/trace 2>/dev/null
	CM_STOPPED=0 CM_PHASES=""
	CM_GRC="not run" CM_HRC="not started"
	if [ "$role" = xroce_client ]; then
		host=$name.host-client rlog=/out/logs/$name.guest-server.txt xlog=/out/logs/$name.host-client.txt
		timeout -s KILL "$to" stdbuf -oL "${tool[@]}" >"$rlog" 2>&1 &
		local gpid=$!
		if ! cm_wait_listen "$port" "$gpid"; then
			why="the guest's ${tool[0]} did not listen on port $port"
			stop "$gpid"
			wait "$gpid"
			CM_GRC=$?
		elif ! cm_phase listen || ! cm_host_start "$host" "$to" xroce "$@"; then
			why="the host did not start xroce"
			stop "$gpid"
			wait "$gpid"
		else
			cm_phase host
			cm_wait "$host" "$gpid" "$rlog" ""
		fi
		clog=$xlog slog=$rlog
	else
		host=$name.host-server rlog=/out/logs/$name.guest-client.txt xlog=/out/logs/$name.host-server.txt
		if cm_host_start "$host" "$to" xroce "$@"; then
			cm_phase host
			# xroce opens the device and listens; a REQ that comes
			# before is refused (REJ 8) and the tool is run again.
			nap 0.5
			while :; do
				tries=$((tries + 1))
				timeout -s KILL "$to" stdbuf -oL "${tool[@]}" >"$rlog" 2>&1 &
				cm_wait "$host" $! "$rlog" "$([ $tries -lt 20 ] && echo "$CM_REFUSED")"
				[ "$CM_RETRY" = 1 ] || break
				cp "$rlog" "$rlog.refused$tries"
				nap 0.3
			done
		else
			why="the host did not start xroce"
		fi
		clog=$rlog slog=$xlog
	fi
	cm_phase done
	cm_counters >"$c1"
	moves=$(cm_counter_moves "$c0" "$c1")
	cp /sys/kernel/tracing/trace "/out/logs/$name.cm-trace.txt" 2>/dev/null
	if [ -z "$why" ] && [ "$CM_GRC" = 0 ] && [ "$CM_HRC" = 0 ]; then
		why=$($chk "$clog" "$slog" 2>&1)
	elif [ -z "$why" ]; then
		why="rxe ${tool[0]} exit $CM_GRC, xroce exit $CM_HRC$([ "$CM_STOPPED" != 0 ] && echo " (one was stopped ${CM_STOPPED}s after the other ended)"): $(grep -v '^ *$' "$xlog" 2>/dev/null | tail -1 | cut -c1-100) / $(grep -v '^ *$' "$rlog" 2>/dev/null | tail -1 | cut -c1-80)"
	fi
	[ $tries -gt 1 ] && moves="$((tries - 1)) refused, run again; $moves"
	local race=""
	if [ -n "$why" ] && [ "${CM_LOSSY:-0}" = 1 ] && race=$(cm_race "$role" "${tool[0]}" "$rlog" "$xlog" "$moves" "$chk"); then
		why="" detail="by rule cm_race: $race; rxe CM: $moves"
	fi
	if [ -n "$race" ]; then
		st=PASS
	elif [ -z "$why" ]; then
		st=PASS
		detail="rxe: $(cm_detail "$rlog"); xroce: $(cm_detail "$xlog"); rxe CM: $moves"
	else
		st=FAIL
		detail="$why; rxe CM: $moves"
	fi
	[ -n "${CM_NOTE:-}" ] && detail="$detail; $($CM_NOTE)"
	result "$name" "$st" "$t0" "$detail"
	cm_phase end
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$w0" "$EPOCHREALTIME" "$st" "$conns" "$moves" "${CM_PHASES# }" >>/out/cm-windows.tsv
}

# cm_phase NAME: when the row reached NAME, seconds since its start (w0):
# the listener up, xroce started, both ended, the row written.
cm_phase() {
	local a=${w0/./} b=${EPOCHREALTIME/./} d
	d=$(((10#$b - 10#$a) / 10000))
	CM_PHASES="$CM_PHASES $1 $((d / 100)).$((d % 100 / 10))$((d % 10))"
}

# cm_wire FILTER: how many frames of the capture so far that match the BPF
# FILTER were captured since the row began (w0). In a filter, udp[8] is the
# BTH opcode (4 SEND only, 17 ACK), udp[12:4] & 0xffffff the destination QP
# (1: a MAD), udp[44:2] a MAD's attribute ID (0x15 DREQ).
cm_wire() {
	tcpdump -r "$CM_PCAP" -tt -n "$1" 2>/dev/null | awk -v t="$w0" '$1 >= t { n++ } END { print n + 0 }'
}

# cm_race ROLE TOOL RXE_LOG XROCE_LOG MOVES CHECK: prints which race of the
# tools under loss made the row fail, and succeeds, when the evidence (exit
# statuses, outputs, rxe's CM counters, the capture) shows that race and
# nothing else. These end the same way between two rxe; xroce is not at
# fault. The capture comes after netem (rxe's frames it drops are not in
# it) and before the ingress filter (xroce's frames it drops are).
cm_race() {
	local role=$1 tool=$2 rlog=$3 xlog=$4 moves=$5 chk=$6 n m
	case $tool.$role in
	rping.xroce_server)
		# rping's client sends its DREQ and destroys its id at once;
		# the kernel's CM then never resends the DREQ (cm_destroy_id
		# in DREQ_SENT cancels it). Lost, the server never learns of
		# the end and waits for ever; xroce's gives up after 30 s.
		[ "$CM_GRC" = 0 ] && grep -q 'nothing from the peer' "$xlog" || return 1
		[ -z "$($chk "$rlog" "$xlog")" ] || return 1
		[[ $moves =~ (^|\; )tx[^\;]*\ dreq\ [1-9] ]] || return 1
		n=$(cm_wire 'src host 198.18.1.2 and udp[12:4] & 0xffffff = 1 and udp[44:2] = 0x15')
		[ "$n" = 0 ] || return 1
		echo "every ping through and checked both ends; rxe's client sent its DREQ (its counters) but none is on the wire: netem dropped it, and the kernel resends no DREQ of a destroyed id, so xroce's server waited for the disconnect (rping's race, the same between two rxe)"
		;;
	rdma_client.xroce_server | rdma_server.xroce_client)
		# rdma_server and rdma_client send one message each and
		# disconnect once they have their own completions: the one
		# that has them first (O) closes its QP (rdma_disconnect moves
		# it to the error state). When O's ACK of the other's (S's)
		# SEND is lost, S's retransmissions go unanswered and S waits
		# for its send completion: for ever on rxe (rxe_comp.c never
		# counts down a retry_cnt of 7), 30 s in xroce's clones.
		local o s ox
		if [ "$CM_HRC" = 0 ] && grep -q ': end 0' "$xlog" && ! grep -q ': end 0' "$rlog"; then
			o=198.18.1.1 s=198.18.1.2 ox="xroce's ${xlog##*.host-}"
			n=$(cm_wire "src host $o and udp[8] = 17")
			[ "$n" -ge 1 ] || return 1
			n="xroce's ACK is on the wire ($n) but the ingress filter dropped it after"
		elif [ "$CM_GRC" = 0 ] && grep -q ': end 0' "$rlog" && grep -q 'rdma_get_send_comp' "$xlog"; then
			o=198.18.1.2 s=198.18.1.1 ox="rxe's ${rlog##*.guest-}"
			n=$(cm_wire "src host $o and udp[8] = 17")
			[ "$n" = 0 ] || return 1
			n="no ACK of rxe's is on the wire: netem dropped it"
		else
			return 1
		fi
		m=$(cm_wire "src host $s and udp[8] = 4")
		[ "$m" -ge 2 ] || return 1
		echo "${ox%.txt} had both its completions, ended 0 and closed its QP; $n, so the peer sent its SEND $m times unanswered and waited for its send completion (the race of rdma_server and rdma_client, the same between two rxe)"
		;;
	*) return 1 ;;
	esac
}

# cm_detail LOG: the figures worth showing from a CM tool's output.
cm_detail() {
	local n
	if grep -q 'ping data: ' "$1"; then
		n=$(grep -c 'ping data: ' "$1")
		echo "$n ping data lines"
	elif grep -qE 'return status|rdma_(server|client): end' "$1"; then
		grep -E 'return status|rdma_(server|client): end' "$1" | tail -1
	else
		detail "$1"
	fi
}

# cm_chk_exit0 CLIENT_LOG SERVER_LOG: nothing beyond the exit statuses.
cm_chk_exit0() { :; }

# cm_chk_rdma: rdma_server and rdma_client print "end 0".
cm_chk_rdma() {
	grep -q 'rdma_client: end 0' "$1" || echo "client did not print 'rdma_client: end 0': $(tail -1 "$1")"
	grep -q 'rdma_server: end 0' "$2" || echo "server did not print 'rdma_server: end 0': $(tail -1 "$2")"
}

# cm_chk_ucmatose: both ends moved all their data and say so.
cm_chk_ucmatose() {
	local f
	for f in "$1" "$2"; do
		grep -q 'data transfers complete' "$f" && grep -q 'return status 0' "$f" ||
			echo "${f##*/} lacks 'data transfers complete' or 'return status 0': $(tail -1 "$f")"
	done
}

# cm_chk_udaddy: both ends moved all their datagrams and say so.
cm_chk_udaddy() { cm_chk_ucmatose "$@"; }

# cm_chk_rping SIZE COUNT CLIENT_LOG SERVER_LOG: with -v the client prints
# "ping data: STRING" for each echo it got back, the server "server ping
# data: STRING" for each ping it read; both must be exactly the COUNT
# strings rping's client sends with -S SIZE (rping.c's rping_test_client):
# "rdma-ping-N: ", then characters from 'A' + N mod 58 up to 'z' and round
# again, SIZE - 1 in all. One awk: forks are dear here.
cm_chk_rping() {
	awk -v s="$1" -v c="$2" -v cl="$3" -v sl="$4" '
		function want(p,   h, n) { h = sprintf("rdma-ping-%d: ", p); n = s - 1 - length(h)
			return n > 0 ? h substr(big, p % 58 + 1, n) : substr(h, 1, s - 1) }
		function check(f, pre, who,   l, n, bad) { n = 0; bad = ""
			while ((getline l <f) > 0) {
				if (index(l, pre) != 1) continue
				l = substr(l, length(pre) + 1)
				if (bad == "" && (n >= c || l != want(n))) bad = "line " n + 1 " differs: " substr(l, 1, 40)
				n++
			}
			close(f)
			if (bad == "" && n != c) bad = n " lines"
			if (bad != "") printf "%s ping data are not rping\x27s %d strings of %d B: %s; ", who, c, s, bad }
		BEGIN {
			for (i = 65; i <= 122; i++) cyc = cyc sprintf("%c", i)
			big = cyc
			while (length(big) < s + 60) big = big big
			check(cl, "ping data: ", "client")
			check(sl, "server ping data: ", "server")
		}'
}

# cm_has TOOL: whether the xroce binary has the command (perf_R: perf -R).
cm_has() {
	if [ "$1" = perf_R ]; then
		/out/xroce help perf 2>&1 | grep -E '^\s+-R\b' | grep -qv 'not supported'
	else
		/out/xroce help 2>&1 | grep -qE "^\s+$1\b"
	fi
}

# cm_chk_rstream CLIENT_LOG SERVER_LOG: both ends printed the table's
# header and a "custom" line (rstream -S/-C prints one test, after its
# 16-byte sync; with -T v both verified every byte they read).
cm_chk_rstream() {
	local f
	for f in "$1" "$2"; do
		grep -q '^name .*usec/xfer$' "$f" && grep -qE '^custom +[0-9.]+[kmg]? ' "$f" ||
			echo "${f##*/} lacks rstream's table with a custom line: $(tail -1 "$f")"
		! grep -q 'verification failed' "$f" || echo "${f##*/}: $(grep 'verification failed' "$f")"
	done
}

# RS_PRELOAD: librdmacm's preload library, which moves a TCP program's
# sockets onto rsockets.
RS_PRELOAD=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)

# rs_rows PREFIX: rsocket streams. rstream (librdmacm's) against xroce
# rstream, with verification, both roles, several sizes; and an unmodified
# TCP program in the guest (rstream -T s, plain sockets) under
# LD_PRELOAD=librspreload.so against xroce rstream.
rs_rows() {
	local p=$1 X=$CM_XROCE R=$CM_RXE sc s c i a
	if ! cm_has rstream; then
		result "$p.rstream" SKIP "$(now)" "this xroce has no rstream"
		return
	fi
	for sc in 64:500:1 4096:100:2 1000000:5:1; do
		IFS=: read -r s c i <<<"$sc"
		a=(-S "$s" -C "$c" -I "$i" -T v)
		cm_row "$p.rstream.s$s.c$c.xroce_client" xroce_client 1 7471 cm_chk_rstream rstream -b $R "${a[@]}" -- \
			rstream -s $R "${a[@]}"
		cm_row "$p.rstream.s$s.c$c.xroce_server" xroce_server 1 7471 cm_chk_rstream rstream -s $X "${a[@]}" -- \
			rstream -b $X "${a[@]}"
	done
	rs_rcopy_row "$p.rcopy.xroce_client" xroce_client
	rs_rcopy_row "$p.rcopy.xroce_server" xroce_server
	if [ -z "$RS_PRELOAD" ]; then
		result "$p.preload" SKIP "$(now)" "no librspreload.so in the guest"
		return
	fi
	rs_http_row "$p.preload.nc_http.xroce_server"
	a=(-S 65536 -C 20 -T v)
	cm_row "$p.preload.rstream_tcp.xroce_client" xroce_client 1 7471 cm_chk_rstream env LD_PRELOAD="$RS_PRELOAD" \
		rstream -T s -b $R "${a[@]}" -- rstream -s $R "${a[@]}"
	cm_row "$p.preload.rstream_tcp.xroce_server" xroce_server 1 7471 cm_chk_rstream env LD_PRELOAD="$RS_PRELOAD" \
		rstream -T s -s $X "${a[@]}" -- rstream -b $X "${a[@]}"
}

# rs_rcopy_row NAME ROLE: a file of 3 MiB and 5 bytes copied with rcopy.
# xroce_client: the guest's rcopy serves (for ever: it is stopped once the
# copy is done) and xroce rcopy sends /out/NAME.src into /tmp; xroce_server:
# xroce rcopy serves one client (-n 1) in the host's folder of /out and the
# guest's rcopy sends the file there. PASS when the sender ends 0 and the
# copy's MD5 is the source's.
rs_rcopy_row() { rowrun _rs_rcopy_row "$@"; }

# rs_rcopy_race: prints the race of rsocket's close under loss that left the
# guest's rcopy client hanging after xroce's server ended well, and
# succeeds, when the row's capture (from w0) shows it and nothing else.
# rcopy's server closes once it reads the client's DISCONNECT (rshutdown,
# the last message the client sends, by default a zero-length WRITE with
# immediate); the client's rshutdown waits for that message's ACK. When the
# ingress filter drops xroce's ACK (it is in the capture, taken before the
# filter), the client resends the message to a QP that is gone, for ever:
# rsocket asks for a retry count of 7, and rxe never counts one of 7 down
# (rxe_comp.c). The same happens between two rxe. The capture's frames are
# read as in cm_td_scan: udp[8] the opcode (13 to 18, a responder's: READ
# responses, ACK 17, atomic ACK), udp[12:4] & 0xffffff the destination QP (1:
# a MAD), udp[17:3] the PSN.
rs_rcopy_race() {
	tcpdump -r "$CM_PCAP" -tt -n -x 'udp port 4791 and not udp[12:4] & 0xffffff = 1' 2>/dev/null |
		awk -v t0="$w0" -v x="$CM_XROCE." '
			BEGIN { xack = -1 }
			function hex(s,   i, v) { v = 0; for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
			function out(   op, psn) { if (tm == "" || tm + 0 < t0 + 0) return
				op = hex(substr(h, 57, 2)); psn = hex(substr(h, 75, 6))
				if (who == "xroce") { xlast = tm; if (op == 17) xack = psn; return }
				if (op >= 13 && op <= 18 || op > 23) return
				if (psn != last) { last = psn; sent = 0 }
				sent++; rlast = tm }
			/^[0-9]/ { out(); tm = $1; who = index($3, x) == 1 ? "xroce" : "rxe"; h = ""; n = 0; next }
			n++ < 5 { for (i = 2; i <= NF; i++) h = h $i }
			END { out()
				if (last == "" || sent < 2 || xack != last || xlast + 0 >= rlast + 0) exit 1
				printf "the copy is whole (MD5 equal) and xroce rcopy ended 0 after the client'\''s DISCONNECT; xroce'\''s ACK of that message (PSN %d) is on the wire but the ingress filter dropped it, and rxe sent the message %d times, the last %.1f s after xroce'\''s last frame: rsocket'\''s retry count of 7 is endless on rxe, so rcopy'\''s rshutdown waits for ever for a QP that is gone (rsocket'\''s race, the same between two rxe)\n", last, sent, rlast - xlast }'
}
_rs_rcopy_row() {
	local name=$1 role=$2 to=${XROCE_TIMEOUT:-120} t0 w0 src=/out/$1.src dst gpid grc hrc why="" st moves race detail=""
	t0=$(now)
	w0=$EPOCHREALTIME
	cm_counters >/tmp/cm.counters0
	cm_has rcopy || { result "$name" SKIP "$t0" "this xroce has no rcopy"; return; }
	head -c $((3 * 1024 * 1024 + 5)) /dev/urandom >"$src"
	if [ "$role" = xroce_client ]; then
		dst=/tmp/$name.copy
		rm -f "$dst"
		timeout -s KILL "$to" stdbuf -oL rcopy >"/out/logs/$name.guest-server.txt" 2>&1 &
		gpid=$!
		if ! cm_wait_listen 7427 "$gpid"; then
			why="the guest's rcopy did not listen on 7427"
		elif ! cm_host_start "$name.host-client" "$to" xroce rcopy "${src#/out/}" "$CM_RXE:$dst"; then
			why="the host did not start xroce"
		else
			hrc=$(host_wait "$name.host-client" "$to")
			[ "$hrc" = 0 ] || why="xroce rcopy exit $hrc: $(tail -1 "/out/logs/$name.host-client.txt")"
		fi
		stop "$gpid"
		wait "$gpid" 2>/dev/null
	else
		dst=/out/$name.copy
		rm -f "$dst"
		if ! cm_host_start "$name.host-server" "$to" xroce rcopy -n 1 -d tap0; then
			why="the host did not start xroce"
		else
			nap 0.5
			for _ in $(seq 20); do
				timeout -s KILL "$to" stdbuf -oL rcopy "$src" "$CM_XROCE:${dst#/out/}" >"/out/logs/$name.guest-client.txt" 2>&1 &
				gpid=$!
				stall_watch "$gpid" "$name.host-server" "/out/logs/$name.rxe-stall.txt"
				wait "$gpid"
				grc=$?
				grep -q 'rconnect failed' "/out/logs/$name.guest-client.txt" || break
				nap 0.3
			done
			hrc=$(host_wait "$name.host-server" "$to")
			[ "$grc" = 0 ] && [ "$hrc" = 0 ] || why="rcopy exit $grc, xroce rcopy exit $hrc: $(tail -1 "/out/logs/$name.guest-client.txt")"
			[ -n "$why" ] && [ -e "/out/logs/$name.rxe-stall.txt" ] && why+="; rcopy outlived xroce rcopy by 10 s and was stopped: rxe's QPs and rcopy's kernel stacks then in logs/$name.rxe-stall.txt"
		fi
	fi
	if [ "$(md5sum <"$src")" != "$(md5sum <"$dst" 2>/dev/null)" ]; then
		[ -z "$why" ] && why="the copy differs: $(stat -c %s "$dst" 2>/dev/null || echo none) bytes, want $(stat -c %s "$src")"
	elif [ -n "$why" ] && [ "$role" = xroce_server ] && [ "${CM_LOSSY:-0}" = 1 ] && [ "$hrc" = 0 ] && [ -e "/out/logs/$name.rxe-stall.txt" ] &&
		grep -q 'closing\.\.\.done' "/out/logs/$name.guest-client.txt" && race=$(rs_rcopy_race); then
		why="" detail="by rule rs_rcopy_race: $(stat -c %s "$dst") bytes: $race"
	fi
	if [ -z "$why" ]; then
		st=PASS
		result "$name" PASS "$t0" "${detail:-$(stat -c %s "$dst") bytes, MD5 equal; $(grep -hoE '[0-9]+ bytes in .*' /out/logs/"$name".*.txt | head -1)}"
	else
		st=FAIL
		result "$name" FAIL "$t0" "$why"
	fi
	# The row's window and what rxe's CM sent and received in it, for the
	# host's check of its CM MADs (one connection): under loss, an RTU or
	# DREP of rxe's that netem dropped is missing from the capture, and
	# only the counters tell that rxe sent it.
	cm_counters >/tmp/cm.counters1
	moves=$(cm_counter_moves /tmp/cm.counters0 /tmp/cm.counters1)
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$w0" "$EPOCHREALTIME" "$st" 1 "$moves" "" >>/out/cm-windows.tsv
	rm -f "$src" "$dst"
}

# rs_http_row NAME: Go's net/http on the host (interop/cmd/rshttp, a
# package stream listener over RDMA CM) answers two HTTP/1.0 GETs that
# busybox nc sends in the guest under LD_PRELOAD=librspreload.so (the
# request on its stdin; at its end nc shuts its writing side down, an
# rsocket SHUTDOWN, and reads the answer to the peer's DISCONNECT):
# /hello, and /lines of 4000 numbered lines, each checked. nc because it
# opens a plain socket and polls it: Perl's and Go's sockets carry
# SOCK_CLOEXEC, which rsocket() refuses (the preload then falls back to
# the kernel's TCP); bash's /dev/tcp redirections check the descriptor with
# F_GETFD, and busybox wget's fdopen its access mode with F_GETFL, neither
# of which rdma-core 44's preload answers for an rsocket.
rs_http_row() { rowrun _rs_http_row "$@"; }
_rs_http_row() {
	local name=$1 to=${XROCE_TIMEOUT:-120} t0 w0 why="" hrc st n l1=/out/logs/$1.hello.txt l2=/out/logs/$1.lines.txt moves
	t0=$(now)
	w0=$EPOCHREALTIME
	cm_counters >/tmp/cm.counters0
	if ! cm_host_start "$name.host-server" "$to" rshttp -d tap0 -listen "$CM_XROCE:8080" -requests 2 -timeout "${to}s"; then
		why="the host did not start rshttp"
	else
		nap 0.5
		for _ in $(seq 20); do
			printf 'GET /hello HTTP/1.0\r\n\r\n' | timeout -s KILL 60 env LD_PRELOAD="$RS_PRELOAD" busybox nc $CM_XROCE 8080 >"$l1" 2>&1
			grep -q 'Connection refused' "$l1" || break
			nap 0.3
		done
		printf 'GET /lines?n=4000 HTTP/1.0\r\n\r\n' | timeout -s KILL 60 env LD_PRELOAD="$RS_PRELOAD" busybox nc $CM_XROCE 8080 >"$l2" 2>&1
		hrc=$(host_wait "$name.host-server" 30)
		# The body follows the header's empty line; its lines are numbered.
		n=$(awk 'b && $0 == sprintf("xroce line %06d", ++i) { n++ } /^\r?$/ { b = 1 } END { print n + 0 }' "$l2")
		if ! grep -q '^HTTP/1.0 200 OK' "$l1" || ! grep -q 'hello from net/http over rsocket' "$l1"; then
			why="/hello: $(head -c 200 "$l1" | tr '\r\n' '  ')"
		elif ! grep -q '^HTTP/1.0 200 OK' "$l2" || [ "$n" != 4000 ] || [ "$(grep -c '^xroce line' "$l2")" != 4000 ]; then
			why="/lines: $n of 4000 lines right; $(head -1 "$l2")"
		elif [ "$hrc" != 0 ]; then
			why="rshttp exit $hrc: $(tail -1 "/out/logs/$name.host-server.txt")"
		fi
	fi
	if [ -z "$why" ]; then
		st=PASS
		result "$name" PASS "$t0" "busybox nc under librspreload.so: GET /hello and GET /lines (4000 lines, 72 KB) answered by net/http over an xroce rsocket listener"
	else
		st=FAIL
		result "$name" FAIL "$t0" "$why"
	fi
	# As rs_rcopy_row: rxe's CM counters for the host's check (two connections).
	cm_counters >/tmp/cm.counters1
	moves=$(cm_counter_moves /tmp/cm.counters0 /tmp/cm.counters1)
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$w0" "$EPOCHREALTIME" "$st" 2 "$moves" "" >>/out/cm-windows.tsv
}

# cm_rows PREFIX LOSSY: the rows of the cm mode, named PREFIX.*.
cm_rows() {
	local p=$1 lossy=$2 X=$CM_XROCE R=$CM_RXE s c t q n sc
	# rdma_server/rdma_client: librdmacm's synchronous "ep" API, 16 B each
	# way; both ends disconnect (their DREQs may cross).
	if cm_has rdma_server && cm_has rdma_client; then
		cm_row "$p.rdma.xroce_client" xroce_client 1 7471 cm_chk_rdma rdma_server -s $R -- rdma_client -s $R
		cm_row "$p.rdma.xroce_server" xroce_server 1 7471 cm_chk_rdma rdma_client -s $X -- rdma_server -s $X
	else
		result "$p.rdma" SKIP "$(now)" "this xroce has no rdma_server or rdma_client"
	fi
	# ucmatose: the server sends first and disconnects first.
	if cm_has ucmatose; then
		cm_row "$p.ucmatose.xroce_client" xroce_client 1 7471 cm_chk_ucmatose ucmatose -b $R -- ucmatose -s $R
		cm_row "$p.ucmatose.xroce_server" xroce_server 1 7471 cm_chk_ucmatose ucmatose -s $X -- ucmatose -b $X
		cm_row "$p.ucmatose.c100.s1000.xroce_client" xroce_client 1 7471 cm_chk_ucmatose ucmatose -b $R -C 100 -S 1000 -- \
			ucmatose -s $R -C 100 -S 1000
		cm_row "$p.ucmatose.c100.s1000.xroce_server" xroce_server 1 7471 cm_chk_ucmatose ucmatose -s $X -C 100 -S 1000 -- \
			ucmatose -b $X -C 100 -S 1000
	else
		result "$p.ucmatose" SKIP "$(now)" "this xroce has no ucmatose"
	fi
	# rping -v -V: the server READs the client's ping, WRITEs it back; the
	# client checks it (-V); both print it (-v), and both must print
	# rping's exact strings.
	if cm_has rping; then
		for sc in 64:10 4096:100 65000:20; do
			s=${sc%:*} c=${sc#*:}
			cm_row "$p.rping.s$s.c$c.xroce_client" xroce_client 1 7174 "cm_chk_rping $s $c" rping -s -v -V -S "$s" -a $R -- \
				rping -c -v -V -S "$s" -C "$c" -a $R
			cm_row "$p.rping.s$s.c$c.xroce_server" xroce_server 1 7174 "cm_chk_rping $s $c" rping -c -v -V -S "$s" -C "$c" -a $X -- \
				rping -s -v -V -S "$s" -a $X
		done
	else
		result "$p.rping" SKIP "$(now)" "this xroce has no rping"
	fi
	# perftest -R: a control connection and one per QP, all to port 18515.
	if cm_has perf_R; then
		# TEST:QPS:ITERATIONS:SIZE (-q only for bandwidth: ib_write_lat
		# refuses it, "Multiple QPs only available on bw tests").
		local a nm
		for t in write_bw:2:100:65536 read_bw:1:100:65536 send_bw:2:100:4096 write_lat:1:200:8; do
			IFS=: read -r t q n s <<<"$t"
			a=(-R -n "$n" -s "$s") nm=$p.perf.$t
			[ "${t#*_}" = bw ] && a+=(-q "$q") nm=$nm.q$q
			cm_row "$nm.xroce_client" xroce_client $((q + 1)) 18515 cm_chk_exit0 \
				"ib_$t" -d rxetap -x 1 -F "${a[@]}" -- perf "$t" -d tap0 -F "${a[@]}" $R
			cm_row "$nm.xroce_server" xroce_server $((q + 1)) 18515 cm_chk_exit0 \
				"ib_$t" -d rxetap -x 1 -F "${a[@]}" $X -- perf "$t" -d tap0 -F "${a[@]}"
		done
		# UD (-c UD): the control connection is RC, the data QP is
		# found with SIDR (Q_Key 0x01234567); a message fits the MTU.
		a=(-R -c UD -n 100 -s 2048)
		if [ "$lossy" = 1 ]; then
			result "$p.perf.send_bw.ud" SKIP "$(now)" "UD is unreliable: ib_send_bw's server waits forever for a lost datagram"
		else
			cm_row "$p.perf.send_bw.ud.xroce_client" xroce_client 1+sidr 18515 cm_chk_exit0 \
				ib_send_bw -d rxetap -x 1 -F "${a[@]}" -- perf send_bw -d tap0 -F "${a[@]}" $R
			cm_row "$p.perf.send_bw.ud.xroce_server" xroce_server 1+sidr 18515 cm_chk_exit0 \
				ib_send_bw -d rxetap -x 1 -F "${a[@]}" $X -- perf send_bw -d tap0 -F "${a[@]}"
		fi
	else
		result "$p.perf" SKIP "$(now)" "this xroce's perf has no -R (rdma_cm) yet"
	fi
	# udaddy: UD over SIDR (SIDR_REQ, SIDR_REP with QPN and Q_Key), 10
	# datagrams each way; port 7174 in the UDP port space.
	if [ "$lossy" = 1 ]; then
		result "$p.udaddy" SKIP "$(now)" "UD is unreliable: udaddy waits forever for a lost datagram"
	elif cm_has udaddy; then
		cm_row "$p.udaddy.xroce_client" xroce_client sidr 7174 cm_chk_udaddy udaddy -b $R -- udaddy -s $R
		cm_row "$p.udaddy.xroce_server" xroce_server sidr 7174 cm_chk_udaddy udaddy -s $X -- udaddy -b $X
	else
		result "$p.udaddy" SKIP "$(now)" "this xroce has no udaddy"
	fi
	rs_rows "$p"
}

# cm_capture_start PREFIX / cm_capture_stop PREFIX: tcpdump on eth0 (both
# stacks' frames; xroce's bypass the host's kernel).
cm_capture_start() {
	# -U: each frame is written at once, so that cm_wire can read the
	# capture while it grows.
	CM_PCAP=/tmp/$1.pcap
	tcpdump -i eth0 -s 0 -B 65536 -U -w "$CM_PCAP" udp port 4791 2>"/out/logs/$1.tcpdump.txt" &
	TCPDUMP=$!
	for _ in $(seq 50); do grep -q 'listening on' "/out/logs/$1.tcpdump.txt" && break; sleep 0.1; done
}
cm_capture_stop() {
	local t0
	t0=$(now)
	sleep 0.5
	kill -INT "$TCPDUMP"
	wait "$TCPDUMP"
	cp "/tmp/$1.pcap" "/out/pcap/$1.pcap"
	rm -f "/tmp/$1.pcap"
	result "$1.tcpdump" PASS "$t0" "$(grep -E 'captured|dropped' "/out/logs/$1.tcpdump.txt" | paste -sd' ')"
}

# cm_loopback PREFIX: rping between two ids of rxetap in the guest (rxe's
# loopback, not on the wire): the tools, rdma_ucm and rping's strings work.
cm_loopback() {
	local t0 spid src crc why
	t0=$(now)
	timeout -s KILL 60 stdbuf -oL rping -s -v -S 64 -a $CM_RXE -p 7175 >"/out/logs/$1.rxe_loopback.server.txt" 2>&1 &
	spid=$!
	if cm_wait_listen 7175 "$spid"; then
		timeout -s KILL 60 stdbuf -oL rping -c -v -V -S 64 -C 3 -a $CM_RXE -p 7175 >"/out/logs/$1.rxe_loopback.client.txt" 2>&1
		crc=$?
	else
		crc="not run"
	fi
	for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	stop "$spid"
	wait "$spid"
	src=$?
	why=$(cm_chk_rping 64 3 "/out/logs/$1.rxe_loopback.client.txt" "/out/logs/$1.rxe_loopback.server.txt")
	if [ "$src" = 0 ] && [ "$crc" = 0 ] && [ -z "$why" ]; then
		result "$1.rxe_loopback" PASS "$t0" "rping -S 64 -C 3 between two rdma_cm ids of rxetap: 3 ping data lines each side match"
	else
		result "$1.rxe_loopback" FAIL "$t0" "server exit $src, client exit $crc: $why $(tail -1 "/out/logs/$1.rxe_loopback.client.txt")"
	fi
}

# cm_suite PREFIX: setup, capture and rows.
cm_suite() {
	local p=$1 t0
	t0=$(now)
	if ! cm_setup; then
		result "$p.setup" FAIL "$t0" "no /dev/infiniband/rdma_cm after modprobe rdma_ucm"
		return 1
	fi
	result "$p.setup" PASS "$t0" "rdma_ucm loaded; ib_cm tracepoints $(ls -d /sys/kernel/tracing/events/ib_cma /sys/kernel/tracing/events/rdma_cma 2>/dev/null | sed 's|.*/||' | paste -sd+ | sed 's/^$/none/') on; $(rdma link show rxetap/1 | awk '{ print $2, $4, $NF }')"
	want "$p.rxe_loopback" && cm_loopback "$p"
	if ! /out/xroce help 2>&1 | grep -qE '^\s+(rping|ucmatose|rdma_server|rdma_client|udaddy)\b' && ! cm_has perf_R; then
		result "$p.rows" SKIP "$(now)" "this xroce has none of rping, ucmatose, rdma_server, rdma_client, udaddy, perf -R"
		touch "/out/pcap/$p.skipped"
		return 1
	fi
	cm_capture_start "$p"
	cm_rows "$p" "${CM_LOSSY:-0}"
	[ -n "${CM_EXTRA_ROWS:-}" ] && $CM_EXTRA_ROWS "$p"
	cm_capture_stop "$p"
}

mode_cm() {
	cm_suite cm
}

# --- cmloss: the cm rows under 1% loss both ways, and every CM MAD lost once ---

# cm_loss_on / cm_loss_off: 1% of rxe's frames (netem on eth0's egress, as
# xloss) and 1% of xroce's RoCE frames (a u32 filter on eth0's ingress, UDP
# 4791, gact drop with probability 1/100: the host kernel has no netem) are
# lost. tcpdump on eth0 sees the frames of xroce that the ingress filter
# drops (taps come before tc ingress) but not those of rxe that netem drops
# (taps come after the qdisc).
cm_loss_on() {
	tc qdisc replace dev eth0 root netem loss 1%
	tc qdisc replace dev eth0 clsact
	tc filter add dev eth0 ingress pref 10 protocol ip u32 match ip protocol 17 0xff match u16 4791 0xffff at 22 \
		action gact pass random netrand drop 100
}
cm_loss_stats() {
	tc -s qdisc show dev eth0
	tc -s filter show dev eth0 ingress
	tc -s filter show dev eth0 egress
}
cm_loss_off() {
	tc qdisc del dev eth0 root 2>/dev/null
	tc qdisc del dev eth0 clsact 2>/dev/null
}
# cm_drops FILE: "RXE XROCE", the frames netem dropped and those the ingress
# filter dropped, from cm_loss_stats's output.
cm_drops() {
	awk '/^qdisc netem/ { q = 1 } /^filter/ { q = 0; f = 1 }
		/dropped/ { s = $0; gsub(/[(),]/, " ", s); n = split(s, w, " ")
			for (i = 1; i < n; i++) if (w[i] == "dropped") { if (q) rx += w[i+1]; else if (f) xr += w[i+1] } }
		END { print rx + 0, xr + 0 }' "$1"
}

# MADs lost on purpose: the first (and every odd) REQ, REP, RTU, DREQ or
# DREP of a chosen side are dropped, matched by u32 filters on eth0's clsact
# hooks (ingress: xroce's, egress: rxe's) on UDP 4791, BTH DestQP 1, MAD
# class 0x07 and the attribute ID (IP offset 64: IPv4 20 + UDP 8 + BTH 12 +
# DETH 8 + 16 into the MAD header); "gact pipe random determ pass 2" passes
# the even matches and sends the odd ones on to the next action. On ingress
# that is a drop. On egress a drop there would be no loss: rxe sees
# NET_XMIT_DROP and sends the packet again at once (rxe_send returns -EAGAIN
# to the requester); so the odd MADs are marked (skbedit mark 0x7e) and the
# root qdisc, a prio whose every priority goes to band 1, sends the marked
# ones (fw filter) to band 3, a netem "loss 100%", which drops silently as
# the random loss does.
CM_MAD_TYPES="REQ:0x0010 REP:0x0013 RTU:0x0014 DREQ:0x0015 DREP:0x0016"
# cm_mad_drop DIR TYPE...: drop the odd TYPE MADs going DIR (ingress: from
# xroce, egress: from rxe).
cm_mad_drop() {
	local dir=$1 t tp k=0 last
	shift
	last=(action gact drop)
	if [ "$dir" = egress ]; then
		last=(action skbedit mark 0x7e)
		tc qdisc replace dev eth0 root handle 1: prio bands 3 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
		tc qdisc replace dev eth0 parent 1:3 handle 30: netem loss 100%
		tc filter replace dev eth0 parent 1: protocol ip pref 1 handle 0x7e fw classid 1:3
	fi
	for t in $CM_MAD_TYPES; do
		k=$((k + 1))
		for tp in "$@"; do
			[ "$tp" = "${t%:*}" ] || continue
			tc filter add dev eth0 "$dir" pref "$k" protocol ip u32 match u16 4791 0xffff at 22 \
				match u32 0x00000001 0x00ffffff at 32 match u8 0x07 0xff at 49 match u16 "${t#*:}" 0xffff at 64 \
				action gact pipe random determ pass 2 "${last[@]}"
		done
	done
}
# cm_mad_stats DIR: "TYPE MATCHED DROPPED" for each MAD filter of DIR: the
# packets of its first action (all it matched) and of its second (the odd
# ones, dropped).
cm_mad_stats() {
	tc -s filter show dev eth0 "$1" | awk -v types="$CM_MAD_TYPES" '
		BEGIN { n = split(types, t, " "); for (i = 1; i <= n; i++) { split(t[i], kv, ":"); nm[i] = kv[1] } }
		/^filter .* pref [0-9]+ / { for (i = 1; i <= NF; i++) if ($i == "pref") p = $(i+1); a = 0 }
		/^[ \t]*Sent [0-9]+ bytes [0-9]+ pkt/ { a++; for (i = 1; i <= NF; i++) if ($i == "pkt") v = $(i-1); if (a == 1) hit[p] = v; else if (a == 2) drop[p] = v }
		END { for (i = 1; i <= n; i++) if (i in hit) print nm[i], hit[i], drop[i] + 0 }'
}
# cm_mad_note: what the MAD filters matched and dropped (CM_NOTE of a row).
cm_mad_note() {
	local dir who
	for dir in ingress egress; do
		who=xroce
		[ $dir = egress ] && who=rxe
		cm_mad_stats $dir | awk -v who=$who '{ o = o sprintf("%s%s %d of %d", (o == "" ? "" : ", "), $1, $3, $2) }
			END { if (o != "") printf "%s\x27s MADs dropped: %s; ", who, o }'
	done
}

# cm_chk_madloss SIZE COUNT CLIENT_LOG SERVER_LOG: rping's check, and every
# MAD filter dropped one MAD and then let its resent copy through (matched
# twice at least): the loss was repaired by the sender's retry (REQ, REP,
# DREQ) or by the peer's (a lost DREP: the DREQ again, answered again; a
# lost RTU: the REP again, answered by an RTU). A lost RTU may also stay
# lost: the passive side then takes the first data packet as the RTU
# (COMM_EST, IBTA 12.9.6.2) and stops resending its REP; rping's client
# sends first, so that is what an xroce passive side does.
cm_chk_madloss() {
	cm_chk_rping "$@"
	local dir who
	for dir in ingress egress; do
		who=xroce
		[ $dir = egress ] && who=rxe
		cm_mad_stats $dir | awk -v who=$who '($3 < 1 || $2 < 2) && $1 != "RTU" {
			printf "%s\x27s %s: %d sent, %d dropped: the lost one was never sent again; ", who, $1, $2, $3 }'
	done
}

# cm_madloss_rows PREFIX: rping (64 B, 10 pings) with the first MAD of each
# kind lost, both roles, random loss off meanwhile. xroce active: xroce's
# REQ, RTU and DREQ and rxe's REP and DREP; rxe active: rxe's REQ and RTU and
# xroce's REP. rxe's DREQ is lost in a row of its own: rping destroys its id
# right after rdma_disconnect and the kernel's CM then stops resending it
# (cm_destroy_id in DREQ_SENT cancels the MAD), so rping's server would wait
# for ever (rping's race, the same between two rxe); xroce's gives up on the
# silence after 30 s and disconnects, and cm_race judges the row. Not
# dropped: xroce's DREP, which the kernel could not ask for again for the
# same reason.
cm_madloss_rows() {
	local p=$1 R=$CM_RXE X=$CM_XROCE
	cm_has rping || return 0
	cm_loss_off
	cm_madloss_row "$p.madloss.rping.xroce_client" "REQ RTU DREQ" "REP DREP" xroce_client \
		rping -s -v -V -S 64 -a $R -- rping -c -v -V -S 64 -C 10 -a $R
	cm_madloss_row "$p.madloss.rping.xroce_server" "REP" "REQ RTU" xroce_server \
		rping -c -v -V -S 64 -C 10 -a $X -- rping -s -v -V -S 64 -a $X
	CM_MADLOSS_CHECK="cm_chk_rping 64 10" cm_madloss_row "$p.madloss.rping.xroce_server.dreq" "" "DREQ" xroce_server \
		rping -c -v -V -S 64 -C 10 -a $X -- rping -s -v -V -S 64 -a $X
}

# cm_madloss_row NAME XROCE_TYPES RXE_TYPES ROLE GUEST_TOOL... -- XROCE_ARGS...:
# one rping row with fresh filters (each repetition its own), dropping the
# odd MADs of XROCE_TYPES from xroce and of RXE_TYPES from rxe; what they
# matched and dropped goes to logs/NAME.filters.txt. The row's check is
# cm_chk_madloss, or CM_MADLOSS_CHECK when set.
cm_madloss_row() { rowrun _cm_madloss_row "$@"; }
_cm_madloss_row() {
	local name=$1 xt=$2 rt=$3 role=$4
	shift 4
	tc qdisc replace dev eth0 clsact
	# shellcheck disable=SC2086 # the types are words
	cm_mad_drop ingress $xt
	# shellcheck disable=SC2086
	cm_mad_drop egress $rt
	CM_NOTE=cm_mad_note _cm_row "$name" "$role" 1 7174 "${CM_MADLOSS_CHECK:-cm_chk_madloss 64 10}" "$@"
	{ cm_mad_stats ingress | sed 's/^/xroce /'; cm_mad_stats egress | sed 's/^/rxe /'; } >"/out/logs/$name.filters.txt"
	cm_loss_off
}

# --- cmloss.teardown: rdma_cm's teardown against rxe, case by case ---
# The rows run after the madloss rows, with no random loss, each with its
# own MAD filters (cm_mad_drop). Each check writes what it saw (counts and
# times from the capture, rxe's CM counters, the filters') to
# /tmp/cm-td.obs, which the row's detail shows (cm_td_note), pass or fail.

# cm_td_scan: reads the capture once (each tcpdump costs seconds in the
# emulated guest) and fills CM_TD[WHO.KEY] with the times of the row's
# frames, in seconds since it began (w0), space-separated: WHO is rxe or
# xroce (the sender), KEY "mad.ATTR" for a CM MAD (xroce.mad.0016: xroce's
# DREPs) or the BTH opcode in decimal for the rest (rxe.4: rxe's SEND
# only, 12 READ request, 17 ACK). Only MADs and those opcodes are read.
declare -A CM_TD
cm_td_scan() {
	local t who k
	CM_TD=()
	while read -r t who k; do
		CM_TD[$who.$k]+="${CM_TD[$who.$k]:+ }$t"
	done < <(tcpdump -r "$CM_PCAP" -tt -n -x 'udp port 4791 and (udp[12:4] & 0xffffff = 1 or udp[8] = 4 or udp[8] = 12 or udp[8] = 17)' 2>/dev/null |
		awk -v t0="$w0" -v x="$CM_XROCE." '
			function hex(s,   i, v) { v = 0; for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
			# h: the frame from its IP header, in hex; IPv4 is 20
			# bytes, so udp[N] is byte 20 + N: the opcode byte 28,
			# DestQP 33-35, a MAD attribute ID 64-65.
			function out() { if (tm == "" || tm + 0 < t0 + 0) return
				k = substr(h, 67, 6) == "000001" ? "mad." substr(h, 129, 4) : hex(substr(h, 57, 2))
				printf "%.3f %s %s\n", tm - t0, who, k }
			/^[0-9]/ { out(); tm = $1; who = index($3, x) == 1 ? "xroce" : "rxe"; h = ""; n = 0; next }
			n++ < 5 { for (i = 2; i <= NF; i++) h = h $i }
			END { out() }')
}
# cm_td_note: the observations of the row's check, and the filters' counts.
cm_td_note() {
	[ -s /tmp/cm-td.obs ] && cat /tmp/cm-td.obs
	cm_mad_note
}
# cm_td_obs TEXT: one observation, for the row's detail.
cm_td_obs() { printf '%s; ' "$*" >>/tmp/cm-td.obs; }
# cm_td_join CHECK ARGS...: CHECK's complaints on one line, "; " between
# them (a row's detail is one field of results.tsv).
cm_td_join() { "$@" | awk 'NF { printf "%s%s", (n++ ? "; " : ""), $0 } END { if (n) print "" }'; }

# cm_td_row NAME XROCE_TYPES RXE_TYPES ROLE PORT CHECK GUEST_TOOL... -- XROCE_ARGS...:
# a cm_row with fresh MAD filters dropping the odd XROCE_TYPES MADs of
# xroce's and the odd RXE_TYPES of rxe's ("" for none); the filters' counts
# go to logs/NAME.filters.txt.
cm_td_row() { rowrun _cm_td_row "$@"; }
_cm_td_row() {
	local name=$1 xt=$2 rt=$3 role=$4 port=$5 chk=$6
	shift 6
	cm_loss_off
	tc qdisc replace dev eth0 clsact
	# shellcheck disable=SC2086 # the types are words
	[ -n "$xt" ] && cm_mad_drop ingress $xt
	# shellcheck disable=SC2086
	[ -n "$rt" ] && cm_mad_drop egress $rt
	rm -f /tmp/cm-td.obs
	CM_NOTE=cm_td_note _cm_row "$name" "$role" 1 "$port" "cm_td_join $chk" "$@"
	{ cm_mad_stats ingress | sed 's/^/xroce /'; cm_mad_stats egress | sed 's/^/rxe /'; } >"/out/logs/$name.filters.txt"
	cm_loss_off
}

# cm_teardown_rows PREFIX: one row per case of the teardown (cm/doc.go,
# "The binding"), each checked on what fails the kernel's way of it:
#   - peer_dreq: the peer's DREQ leaves the QP alone until the application
#     disconnects, so what the peer sent before it all arrives. ucmatose's
#     server (rxe, -C 100 -S 1000) sends its messages, and disconnects as
#     soon as it has xroce's replies; xroce's client must have received
#     all 100, sent its DREQ never and its DREP only after rxe's DREQ. Every
#     rdma-core tool waits for its sends' completions (the ACKs) before it
#     disconnects, so against them the data is in xroce's CQ, not on the
#     wire, when the DREQ comes (cm's TestPeerDREQKeepsQP has the DREQ
#     overtake the data); and the only one whose DREQ is sure to come
#     first is ucmatose's server: rstream's server (rxe) sends last and
#     closes at once, but xroce's client, reading at the host's speed,
#     sent its DREQ 60 ms after rxe's last data frame, before rxe had
#     closed (the first run).
#   - drep_lost: xroce's first DREP is dropped. ucmatose's server (rxe)
#     disconnects first with rdma_disconnect and waits for DISCONNECTED;
#     xroce's client answers, exits, and its Agent.Close still answers the
#     resent DREQ, so rxe's ucmatose ends right after its first resend
#     rather than after all 15 (16 s).
#   - rtu_lost: rxe's RTU is dropped (rping, rxe active); xroce's REP is
#     sent once, and rping's first SEND establishes xroce's side at once
#     (COMM_EST): its RDMA READ follows the SEND, not the REP's time-out.
cm_teardown_rows() {
	local p=$1 R=$CM_RXE X=$CM_XROCE a
	if cm_has ucmatose; then
		a=(-C 100 -S 1000)
		cm_td_row "$p.teardown.peer_dreq.ucmatose.c100.s1000.xroce_client" "" "" xroce_client 7471 cm_chk_td_peer \
			ucmatose -b $R "${a[@]}" -- ucmatose -s $R "${a[@]}"
		# The wrapper says when ucmatose ended, on the capture's clock.
		# shellcheck disable=SC2016 # the wrapper's script
		cm_td_row "$p.teardown.drep_lost.ucmatose.xroce_client" DREP "" xroce_client 7471 cm_chk_td_drep \
			bash -c '"$@"; r=$?; echo "cm_td: exit $r at $EPOCHREALTIME"; exit $r' cm_td ucmatose -b $R -- ucmatose -s $R
	else
		result "$p.teardown.peer_dreq" SKIP "$(now)" "this xroce has no ucmatose"
		result "$p.teardown.drep_lost" SKIP "$(now)" "this xroce has no ucmatose"
	fi
	if cm_has rping; then
		cm_td_row "$p.teardown.rtu_lost.rping.xroce_server" "" RTU xroce_server 7174 "cm_chk_td_rtu 64 10" \
			rping -c -v -V -S 64 -C 10 -a $X -- rping -s -v -V -S 64 -a $X
	else
		result "$p.teardown.rtu_lost" SKIP "$(now)" "this xroce has no rping"
	fi
}

# cm_chk_td_peer CLIENT_LOG SERVER_LOG (xroce's ucmatose client, rxe's
# server, -C 100 -S 1000): ucmatose's check (xroce's "data transfers
# complete" comes after 100 successful receives, and it posts no more, so
# none was flushed before them); from the capture: rxe's 100 SENDs, its
# DREQ once, after them and after its ACK of xroce's last reply; no DREQ
# of xroce's; xroce's DREP once, after rxe's DREQ.
cm_chk_td_peer() {
	local dq xq dp sn ns la
	cm_chk_ucmatose "$@"
	cm_td_scan
	read -r -a dq <<<"${CM_TD[rxe.mad.0015]}"
	read -r -a xq <<<"${CM_TD[xroce.mad.0015]}"
	read -r -a dp <<<"${CM_TD[xroce.mad.0016]}"
	# rxe's SENDs and its last ACK.
	read -r -a sn <<<"${CM_TD[rxe.4]}"
	ns="${#sn[@]} ${CM_TD[rxe.4]##* }" la=${CM_TD[rxe.17]##* }
	cm_td_obs "rxe's SENDs ${ns% *} (the last at ${ns#* } s), its last ACK at ${la:-none} s, its DREQ at ${dq[*]:-none} s; xroce's DREP at ${dp[*]:-none} s, its DREQ at ${xq[*]:-none}"
	# (rxe's retransmit timer may fire early: a SEND twice.)
	[ "${ns% *}" -ge 100 ] || echo "rxe sent ${ns% *} SENDs, want 100"
	[ "${#dq[@]}" = 1 ] || echo "rxe sent its DREQ ${#dq[@]} times, want 1"
	[ "${#xq[@]}" = 0 ] || echo "xroce sent a DREQ (at ${xq[*]} s): the peer's DREQ was not tested alone"
	[ "${#dp[@]}" = 1 ] || echo "xroce sent its DREP ${#dp[@]} times, want 1"
	[ "${#dq[@]}" -ge 1 ] && [ "${#dp[@]}" -ge 1 ] || return 0
	awk -v q="${dq[0]}" -v p="${dp[0]}" -v s="${ns#* }" -v a="${la:-0}" 'BEGIN {
		if (p < q) printf "xroce'\''s DREP (%s s) came before rxe'\''s DREQ (%s s)\n", p, q
		if (q < s || q < a) printf "rxe'\''s DREQ (%s s) came before its last SEND (%s s) or ACK (%s s)\n", q, s, a }'
}

# cm_chk_td_drep CLIENT_LOG SERVER_LOG (xroce's ucmatose client, rxe's
# server): ucmatose's check; rxe's DREQ twice on the wire (the first
# answered by the DREP the filter dropped), xroce's DREP twice (the
# capture sees xroce's frames before the filter), the filter matched 2 and
# dropped 1, rxe counted one DREQ retry; and ucmatose (rxe) exited within
# its resend interval plus a margin of its first DREQ, at most 1.5 s after
# the resend.
cm_chk_td_drep() {
	local dq dp te iv st hit drop
	cm_chk_ucmatose "$@"
	cm_td_scan
	read -r -a dq <<<"${CM_TD[rxe.mad.0015]}"
	read -r -a dp <<<"${CM_TD[xroce.mad.0016]}"
	te=$(awk -v t="$w0" '/^cm_td: exit 0 at / { printf "%.3f", $5 - t }' "$2")
	read -r _ hit drop < <(cm_mad_stats ingress | grep '^DREP ')
	cm_td_obs "rxe's DREQ at ${dq[*]:-none} s, xroce's DREP at ${dp[*]:-none} s (filter: ${drop:-0} of ${hit:-0} dropped), ucmatose's exit at ${te:-none} s"
	[ "${#dq[@]}" = 2 ] || echo "rxe sent its DREQ ${#dq[@]} times, want 2 (the first's DREP lost, the resend answered)"
	[ "${#dp[@]}" = 2 ] || echo "xroce sent its DREP ${#dp[@]} times, want 2"
	[ "${hit:-0}" = 2 ] && [ "${drop:-0}" = 1 ] || echo "the DREP filter matched ${hit:-0} and dropped ${drop:-0}, want 2 and 1"
	[[ $moves =~ retries[^\;]*\ dreq\ 1($|[\;\ ]) ]] || echo "rxe's CM counted no single DREQ retry: $moves"
	[ -n "$te" ] || { echo "ucmatose's exit time is not in its log"; return; }
	[ "${#dq[@]}" -ge 2 ] || return
	iv=$(awk -v a="${dq[0]}" -v b="${dq[1]}" 'BEGIN { printf "%.3f", b - a }')
	st=$(awk -v a="${dq[0]}" -v b="${dq[1]}" -v e="$te" -v i="$iv" 'BEGIN {
		if (e - b > 1.5) printf "ucmatose exited %.3f s after rxe'\''s resent DREQ, want at most 1.5 s", e - b
		else if (e - a > i + 1.5) printf "ucmatose exited %.3f s after its first DREQ, want at most the resend interval %.3f s + 1.5", e - a, i }')
	cm_td_obs "resend interval ${iv} s; ucmatose ended $(awk -v a="${dq[0]}" -v e="$te" 'BEGIN { printf "%.3f", e - a }') s after its first DREQ (all 15 resends: $(awk -v i="$iv" 'BEGIN { printf "%.1f", 15 * i }') s)"
	[ -z "$st" ] || echo "$st"
}

# cm_chk_td_rtu SIZE COUNT CLIENT_LOG SERVER_LOG (rxe's rping client,
# xroce's server): rping's check; rxe sent one RTU and the filter dropped
# it (nothing resends an RTU unless the REP comes again), xroce's REP is on
# the wire once and rxe received one REP (its counters: no duplicate);
# xroce's first RDMA READ follows rxe's first SEND within 0.5 s (COMM_EST),
# not the REP's time-out.
cm_chk_td_rtu() {
	local rep snd rd hit drop d
	cm_chk_rping "$@"
	cm_td_scan
	read -r -a rep <<<"${CM_TD[xroce.mad.0013]}"
	read -r _ hit drop < <(cm_mad_stats egress | grep '^RTU ')
	snd=${CM_TD[rxe.4]%% *} rd=${CM_TD[xroce.12]%% *}
	d=$(awk -v a="$snd" -v b="$rd" 'BEGIN { if (a != "" && b != "") printf "%.3f", b - a }')
	cm_td_obs "xroce's REP at ${rep[*]:-none} s, rxe's RTU dropped ${drop:-0} of ${hit:-0}, rxe's first SEND at ${snd:-none} s, xroce's first READ at ${rd:-none} s (${d:-?} s later)"
	[ "${#rep[@]}" = 1 ] || echo "xroce sent its REP ${#rep[@]} times, want 1"
	[ "${hit:-0}" = 1 ] && [ "${drop:-0}" = 1 ] || echo "the RTU filter matched ${hit:-0} and dropped ${drop:-0}, want 1 and 1"
	[[ $moves =~ (^|\; )rx[^\;]*\ rep\ 1($|[\;\ ]) ]] || echo "rxe's CM did not receive one REP: $moves"
	[[ $moves =~ (^|\; )dup[^\;]*\ rep\  ]] && echo "rxe's CM received a duplicate REP: $moves"
	[ -n "$d" ] || { echo "no SEND of rxe's or no READ of xroce's on the wire"; return; }
	awk -v d="$d" 'BEGIN { exit !(d > 0.5) }' && echo "xroce's READ came ${d} s after rxe's first SEND, want at most 0.5 s (COMM_EST at the first packet, not at the REP's time-out)"
	return 0
}

# mode_cmloss: mode_cm's rows with 1% of the frames lost both ways, then the
# madloss rows.
mode_cmloss() {
	local rx xr
	tap_link
	cm_loss_on
	result cmloss.loss PASS "$(now)" "1% loss both ways: netem on eth0's egress (rxe's frames), gact on eth0's ingress (xroce's RoCE frames)"
	CM_LOSSY=1 CM_EXTRA_ROWS=cm_madloss_rows_stats cm_suite cmloss
	cm_loss_off
	[ -e /out/pcap/cmloss.skipped ] && return
	read -r rx xr < <(cm_drops /out/logs/cmloss.loss-stats.txt)
	if [ -n "${XROCE_ROWS:-}" ] && ! awk -F'\t' '$1 ~ /^cmloss\./ && $1 !~ /^cmloss\.(madloss|teardown)\./ { f = 1 } END { exit !f }' /out/cm-windows.tsv 2>/dev/null; then
		result cmloss.drops SKIP "$(now)" "no row under random loss selected ($rx of rxe's frames dropped by netem, $xr of xroce's by the ingress filter)"
	elif [ "$rx" -gt 0 ] && [ "$xr" -gt 0 ]; then
		result cmloss.drops PASS "$(now)" "$rx of rxe's frames dropped by netem, $xr of xroce's by the ingress filter"
	else
		result cmloss.drops FAIL "$(now)" "$rx of rxe's frames dropped by netem, $xr of xroce's by the ingress filter: want both > 0"
	fi
}
# cm_madloss_rows_stats PREFIX: the random loss's counters, then the madloss rows.
cm_madloss_rows_stats() {
	cm_loss_stats >"/out/logs/$1.loss-stats.txt" 2>&1
	cm_madloss_rows "$1"
	cm_teardown_rows "$1"
}

# --- conform: xroce conform against rxe's transport, rule by rule ---------------------
# The host's `xroce conform` probes rxe's responder (--via: the tool's server
# in the guest, xroce its client) and its requester (--serve: xroce the
# tool's server, the tool's client in the guest), on the tap link. The
# guest's tool runs in a loop for the whole row: a check that moves one of
# its QPs to the error state ends ib_send_bw's or ibv_rc_pingpong's server,
# and each session needs a tool of its own. A row passes when every verdict
# is the one rxe's profile says (interop/testdata/conform-GEN.txt, which
# interop/run copies to /out/conform-expect.txt): a check rxe fails must
# fail, and a verdict that moves, either way, fails the row. xroce's table
# is in logs/NAME.host.txt, the verdicts as a profile in
# logs/NAME.observed.txt (interop/run gathers them into
# conform-observed.txt), JUnit in logs/NAME.junit.xml, the puppet's frames
# in pcap/NAME.pcap.

# conform_loop LOG TIMEOUT WATCH CMD...: CMD again and again (its output
# appended to LOG, each run bounded by TIMEOUT) until TERM. WATCH "conn":
# a run is also ended 2 s after its TCP connection on port 18515 closed (a
# perftest server whose client left mid-test waits for ever, and so does a
# client whose QP the check left stalled); WATCH "none": only TIMEOUT.
conform_loop() {
	local log=$1 to=$2 watch=$3 c="" had gone
	shift 3
	trap 'kill -TERM $c 2>/dev/null; exit 0' TERM
	while :; do
		timeout -s KILL "$to" stdbuf -oL "$@" >>"$log" 2>&1 &
		c=$!
		had=0 gone=0
		while kill -0 "$c" 2>/dev/null; do
			if [ "$watch" = conn ]; then
				if ss -Htn state established '( sport = :18515 or dport = :18515 )' | grep -q .; then
					had=1 gone=0
				elif [ $had = 1 ]; then
					gone=$((gone + 1))
					[ $gone -ge 4 ] && kill -TERM "$c" 2>/dev/null
				fi
			fi
			sleep 0.5
		done
		wait "$c"
		echo "=== exit $? at $(now)" >>"$log"
		sleep 0.3
	done
}

# conform_row NAME TIMEOUT RUN_TIMEOUT WATCH TOOL... -- CONFORM_ARGS...: the
# host's xroce conform with CONFORM_ARGS (and the profile, the observed
# profile, JUnit and pcap), TOOL looped in the guest (conform_loop); PASS
# when xroce conform exits 0: every verdict as the profile says.
conform_row() { rowrun _conform_row "$@"; }
_conform_row() {
	local name=$1 to=$2 rto=$3 watch=$4 t0 tool=() hrc lpid sum prof
	shift 4
	while [ "$1" != "--" ]; do tool+=("$1"); shift; done
	shift
	t0=$(now)
	if ! host_start "$name.host" "$to" xroce conform -d tap0 -expect conform-expect.txt -observed "logs/$name.observed.txt" \
		-junit "logs/$name.junit.xml" -pcap "pcap/$name.pcap" "$@"; then
		result "$name" FAIL "$t0" "the host's xroce conform did not start"
		return
	fi
	conform_loop "/out/logs/$name.guest.txt" "$rto" "$watch" "${tool[@]}" &
	lpid=$!
	hrc=$(host_wait "$name.host" "$to")
	stop "$lpid"
	wait "$lpid" 2>/dev/null
	for _ in $(seq 30); do pgrep -x "${tool[0]}" >/dev/null || break; sleep 0.1; done
	pkill -KILL -x "${tool[0]}"
	sum=$(grep -E '^[0-9]+ checks: ' "/out/logs/$name.host.txt" | tail -1)
	prof=$(grep -E '^profile ' "/out/logs/$name.host.txt" | tail -1)
	if [ "$hrc" = 0 ]; then
		result "$name" PASS "$t0" "$sum; ${prof#profile conform-expect.txt: }"
	else
		result "$name" FAIL "$t0" "xroce conform exit $hrc: ${prof:-$(grep -v '^ *$' "/out/logs/$name.host.txt" 2>/dev/null | tail -1)}"
	fi
}

mode_conform() {
	# A row's bound: xroce conform's checks and sessions (each waits
	# for the guest's tool to start again) take a minute or two under TCG.
	local to=240 t0
	tap_link
	t0=$(now)
	if ! /out/xroce conform -h 2>&1 | grep -q -- '-serve'; then
		result conform.setup SKIP "$t0" "this xroce has no conform --serve"
		return
	fi
	if [ ! -s /out/conform-expect.txt ]; then
		result conform.setup FAIL "$t0" "no profile /out/conform-expect.txt (interop/run copies interop/testdata/conform-GEN.txt)"
		return
	fi
	result conform.setup PASS "$t0" "$(grep -v '^#' /out/conform-expect.txt | grep -c .) expected verdicts: $(head -1 /out/conform-expect.txt | cut -c3-120)"
	# rxe's responder: each tool's server, xroce conform --via its client,
	# a QP of its own for each check. ib_write_bw hosts most checks on its
	# 24 QPs; ib_read_bw and ib_atomic_bw those about READs and atomics;
	# ib_send_bw and ibv_rc_pingpong those about receives.
	conform_row conform.via.write_bw "$to" "$to" conn ib_write_bw -d rxetap -x 1 -F -q 24 -n 1000000 -- \
		--via ib_write_bw -q 24 198.18.1.2
	conform_row conform.via.read_bw "$to" "$to" conn ib_read_bw -d rxetap -x 1 -F -q 8 -n 1000000 -- \
		--via ib_read_bw -q 8 -run 'dup-read|rd-atomic-limit' 198.18.1.2
	conform_row conform.via.atomic_bw "$to" "$to" conn ib_atomic_bw -d rxetap -x 1 -F -q 4 -n 1000000 -- \
		--via ib_atomic_bw -q 4 -run atomic 198.18.1.2
	conform_row conform.via.send_bw "$to" "$to" conn ib_send_bw -d rxetap -x 1 -F -q 4 -n 1000000 -- \
		--via ib_send_bw -q 4 198.18.1.2
	# ibv_rc_pingpong and ibv_ud_pingpong (the UD checks) close their TCP
	# connection after the exchange, and their server waits for ever once a
	# check has had its QP: 8 s a run.
	conform_row conform.via.rc_pingpong "$to" 8 none ibv_rc_pingpong -d rxetap -g 1 -n 1000000 -- \
		--via ibv_rc_pingpong 198.18.1.2
	conform_row conform.via.ud_pingpong "$to" 8 none ibv_ud_pingpong -d rxetap -g 1 -n 1000000 -- \
		--via ibv_ud_pingpong -run 'ud-' 198.18.1.2
	# rping -P over RDMA CM: the puppet connects its own QP (REQ, REP,
	# RTU); the server names no region, so only its 16-byte receive is
	# checked.
	conform_row conform.via.rping "$to" "$to" none rping -s -P -a 198.18.1.2 -- \
		--via rping -run 'send-too-long' 198.18.1.2
	# rxe's requester: xroce conform --serve as the tool's server, the
	# tool's client in the guest (20 s runs; xroce ends a run it has no
	# more use for with a NAK on each QP).
	conform_row conform.serve.write_bw "$to" "$to" conn ib_write_bw -d rxetap -x 1 -F -q 8 -s 64 -D 20 198.18.1.1 -- \
		--serve ib_write_bw -q 8 -s 64 -linger 5s
	conform_row conform.serve.send_bw "$to" "$to" conn ib_send_bw -d rxetap -x 1 -F -q 8 -s 64 -D 20 198.18.1.1 -- \
		--serve ib_send_bw -q 8 -s 64 -linger 5s
	conform_row conform.serve.read_bw "$to" "$to" conn ib_read_bw -d rxetap -x 1 -F -q 8 -s 4096 -D 20 198.18.1.1 -- \
		--serve ib_read_bw -q 8 -s 4096 -linger 5s
}

# --- compare: rxe<->rxe beside xroce<->xroce, same guest, same sizes and MTU ------

# cmp_fig FILE KIND: from a perftest-format table (perftest's or xroce perf's),
# "BW_average" for bw, "t_typical 99%" for lat (MB/s, microseconds).
cmp_fig() {
	awk -v k="$2" '
		/#bytes.*BW average/ { bw = 1; next }
		/#bytes.*t_typical/ { lat = 1; next }
		bw && $1 ~ /^[0-9]+$/ && k == "bw" { print $4; exit }
		lat && $1 ~ /^[0-9]+$/ && k == "lat" { print $5, $8; exit }' "$1" 2>/dev/null
}

# cmp_rxe NAME TEST ARGS...: ib_TEST between rxe0 (server) and rxe1 (client).
cmp_rxe() {
	local name=$1 t=$2
	shift 2
	pair "compare.rxe.$name" "${XROCE_TIMEOUT:-120}" "ib_$t" -d rxe0 -x 1 -F -m 1024 "$@" -- \
		"ib_$t" -d rxe1 -x 1 -F -m 1024 "$@" 198.18.0.1
}

# cmp_xroce NAME TEST ARGS...: xroce perf TEST, server in namespace xa (xa0
# 198.18.2.1), client in xb (xb0 198.18.2.2).
cmp_xroce() {
	local name=$1 t=$2 to=${XROCE_TIMEOUT:-120} t0 spid src crc
	shift 2
	t0=$(now)
	ip netns exec xa timeout -s KILL "$to" /out/xroce perf "$t" -d xa0 -F -m 1024 "$@" \
		>"/out/logs/compare.xroce.$name.server.txt" 2>&1 &
	spid=$!
	netns_wait_listen xa "$spid"
	ip netns exec xb timeout -s KILL "$to" /out/xroce perf "$t" -d xb0 -F -m 1024 "$@" 198.18.2.1 \
		>"/out/logs/compare.xroce.$name.client.txt" 2>&1
	crc=$?
	for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	stop "$spid"
	wait "$spid"
	src=$?
	if [ $crc -eq 0 ] && [ $src -eq 0 ]; then
		result "compare.xroce.$name" PASS "$t0" "$(detail "/out/logs/compare.xroce.$name.client.txt")"
	else
		result "compare.xroce.$name" FAIL "$t0" "server exit $src, client exit $crc: $(grep -v '^ *$' "/out/logs/compare.xroce.$name.client.txt" | tail -1 | cut -c1-100)"
	fi
}

xroce_netns() {
	ip netns add xa
	ip netns add xb
	ip link add xa0 type veth peer name xb0
	ip link set xa0 netns xa
	ip link set xb0 netns xb
	ip -n xa addr add 198.18.2.1/24 dev xa0
	ip -n xb addr add 198.18.2.2/24 dev xb0
	ip -n xa link set lo up
	ip -n xb link set lo up
	ip -n xa link set xa0 up
	ip -n xb link set xb0 up
	ip -n xa neigh replace 198.18.2.2 lladdr "$(ip netns exec xb cat /sys/class/net/xb0/address)" dev xa0 nud permanent
	ip -n xb neigh replace 198.18.2.1 lladdr "$(ip netns exec xa cat /sys/class/net/xa0/address)" dev xb0 nud permanent
}

# mode_compare: issue 7's side-by-side. The same perftest-format runs between
# two rxe devices (selftest's veth pair) and between two xroce processes (two
# namespaces joined by a veth pair, 1500 MTU so IB MTU 1024 for both), then
# /out/compare.md: MB/s for bandwidth, t_typical (p50) and 99% for latency.
# TEST:SIZE:ITERATIONS, the same for both stacks (a few seconds each under TCG).
CMP_BW="write_bw:4096:2000 write_bw:65536:500 write_bw:1048576:50
	read_bw:4096:2000 read_bw:65536:500 read_bw:1048576:50
	send_bw:4096:2000 send_bw:65536:500 send_bw:1048576:50"
CMP_LAT="write_lat:8:1000 send_lat:8:1000"
CMP_REPEAT=3
# cmp_stat FIGURES...: "median min max count" of numbers ("" when none).
cmp_stat() {
	printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) printf "%s %s %s %d", v[int((NR + 1) / 2)], v[1], v[NR], NR }'
}

mode_compare() {
	local t0 c t s n f k rep r x rs xs
	t0=$(now)
	veth_pair
	xroce_netns
	result compare.setup PASS "$t0" "rxe0/rxe1 on vethA/vethB (MTU $(cat /sys/class/net/vethA/mtu)); xroce on xa0/xb0 in namespaces xa/xb (MTU $(ip netns exec xa cat /sys/class/net/xa0/mtu)); IB MTU 1024 for both"
	# Each test runs CMP_REPEAT times, rxe then xroce, so that the host's
	# load swings hit both stacks alike; the table shows medians and ranges.
	for rep in $(seq "$CMP_REPEAT"); do
		for c in $CMP_BW $CMP_LAT; do
			IFS=: read -r t s n <<<"$c"
			cmp_rxe "$t.s$s.r$rep" "$t" -s "$s" -n "$n"
			cmp_xroce "$t.s$s.r$rep" "$t" -s "$s" -n "$n"
		done
	done
	f=/out/compare.md
	# row: one table row from "median min max" of rxe (rs) and xroce (xs);
	# ratio over 1 means xroce is the better (inv=1: lower is better).
	CMP_ROW='function fig(a, u) { return a[1] == "" ? "-" : sprintf("%s %s (%s–%s)%s", a[1], u, a[2], a[3], a[4] < '"$CMP_REPEAT"' ? ", " a[4] " of '"$CMP_REPEAT"' runs" : "") }
		function ratio(p, q) { return (p > 0 && q > 0) ? sprintf(p / q < 0.1 ? "%.3f×" : "%.2f×", p / q) : "-" }'
	{
		echo "Bandwidth: perftest's BW average in MB/s, median of $CMP_REPEAT runs (min–max); xroce/rxe over 1 means xroce is faster."
		echo
		echo "| test | size | iterations | rxe | xroce | xroce/rxe (medians) |"
		echo "|---|---:|---:|---:|---:|---:|"
		for c in $CMP_BW; do
			IFS=: read -r t s n <<<"$c"
			rs=$(cmp_stat $(for k in $(seq "$CMP_REPEAT"); do cmp_fig "/out/logs/compare.rxe.$t.s$s.r$k.client.txt" bw; done))
			xs=$(cmp_stat $(for k in $(seq "$CMP_REPEAT"); do cmp_fig "/out/logs/compare.xroce.$t.s$s.r$k.client.txt" bw; done))
			awk -v t="$t" -v s="$s" -v n="$n" -v rs="$rs" -v xs="$xs" "$CMP_ROW"'
				BEGIN { split(rs, r, " "); split(xs, x, " ")
					printf "| %s | %s | %s | %s | %s | %s |\n", t, s, n, fig(r, "MB/s"), fig(x, "MB/s"), ratio(x[1], r[1]) }'
		done
		echo
		echo "Latency: microseconds, half a round trip, median of $CMP_REPEAT runs (min–max) of t_typical (p50) and of the 99% percentile; rxe/xroce over 1 means xroce is faster."
		echo
		echo "| test | size | iterations | rxe p50 | xroce p50 | rxe/xroce p50 | rxe p99 | xroce p99 | rxe/xroce p99 |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
		for c in $CMP_LAT; do
			IFS=: read -r t s n <<<"$c"
			rs=$(cmp_stat $(for k in $(seq "$CMP_REPEAT"); do cmp_fig "/out/logs/compare.rxe.$t.s$s.r$k.client.txt" lat | cut -d' ' -f1; done))
			xs=$(cmp_stat $(for k in $(seq "$CMP_REPEAT"); do cmp_fig "/out/logs/compare.xroce.$t.s$s.r$k.client.txt" lat | cut -d' ' -f1; done))
			r=$(cmp_stat $(for k in $(seq "$CMP_REPEAT"); do cmp_fig "/out/logs/compare.rxe.$t.s$s.r$k.client.txt" lat | cut -d' ' -f2; done))
			x=$(cmp_stat $(for k in $(seq "$CMP_REPEAT"); do cmp_fig "/out/logs/compare.xroce.$t.s$s.r$k.client.txt" lat | cut -d' ' -f2; done))
			awk -v t="$t" -v s="$s" -v n="$n" -v rs="$rs" -v xs="$xs" -v r9="$r" -v x9="$x" "$CMP_ROW"'
				BEGIN { split(rs, r, " "); split(xs, x, " "); split(r9, a, " "); split(x9, b, " ")
					printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t, s, n,
						fig(r, "us"), fig(x, "us"), ratio(r[1], x[1]), fig(a, "us"), fig(b, "us"), ratio(a[1], b[1]) }'
		done
	} >"$f"
	result compare.table PASS "$(now)" "written to compare.md"
}

for m in ${XROCE_MODE//,/ }; do
	t0=$(now)
	# interop/run's XROCE_INTEROP_PANIC: the kernel dies here, as it has
	# under TCG, to try how the host handles it.
	[ "$m" = "${XROCE_PANIC:-}" ] && echo c >/proc/sysrq-trigger
	case $m in
	selftest | loss | tap | xroce | xloss | cm | cmloss | conform | compare) "mode_$m" ;;
	*) result "$m" FAIL "$t0" "unknown mode" ;;
	esac
	echo "$m $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')" >>/out/mode-seconds
	# No tool may outlive its mode (a left-over RC client keeps retransmitting).
	left=$(pgrep -l '^(ibv_|ib_(write|read|send|atomic)_|tcpdump|xroce|rping|ucmatose|udaddy|rdma_(server|client))' | paste -sd' ')
	if [ -n "$left" ]; then
		result "$m.leftovers" FAIL "$(now)" "still running after the mode: $left"
		pkill -KILL '^(ibv_|ib_(write|read|send|atomic)_|tcpdump|xroce|rping|ucmatose|udaddy|rdma_(server|client))'
	fi
done
echo "guest: done at $(now)s"
