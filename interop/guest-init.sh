#!/bin/bash
# PID 1 of the interop VM (see interop/README.md). It runs the modes named in
# XROCE_MODE (a kernel parameter, comma-separated: selftest, loss, tap, xroce,
# xloss, compare), writes
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
# result NAME STATUS T0 DETAIL: one row, seconds since T0.
result() {
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$(awk -v a="$3" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')" "$4" >>"$RESULTS"
	echo "guest: $2 $1 ($4)"
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
# same tool as a client against it; PASS when both exit 0.
pair() { rowrun _pair "$@"; }
_pair() {
	local name=$1 to=$2 t0 srv=() cli=() spid src crc
	shift 2
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	t0=$(now)
	timeout -s KILL "$to" "${srv[@]}" >"/out/logs/$name.server.txt" 2>&1 &
	spid=$!
	if ! wait_listen 18515; then
		stop "$spid"
		wait "$spid"
		result "$name" FAIL "$t0" "server did not listen on 18515"
		return
	fi
	timeout -s KILL "$to" "${cli[@]}" >"/out/logs/$name.client.txt" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	if [ $crc -eq 0 ] && [ $src -eq 0 ]; then
		result "$name" PASS "$t0" "$(detail "/out/logs/$name.client.txt")"
	else
		result "$name" FAIL "$t0" "server exit $src, client exit $crc: $(grep -v '^ *$' "/out/logs/$name.client.txt" | tail -1 | cut -c1-100)"
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

# last_ack_lost NAME TOOL_EXIT XROCE_LOG: whether an xloss row failed only
# the way lossy runs of these tools must sometimes end. netem drops the ACK
# of xroce's last message; the guest's tool has everything it waits for
# (it exits 0 only after receiving every message of xroce's, contents
# checked where the row passes -c), destroys its QP and exits; xroce's
# retransmissions then reach no QP and its last completion never comes (a
# real ibv_rc_pingpong in xroce's place would wait the same way). The tool's
# exit 0 proves the data went through; xroce's only complaint is the
# missing completion.
last_ack_lost() {
	[[ $1 == xloss.* ]] && [ "$2" = 0 ] && [ "$(grep -v '^ *$' "$3" 2>/dev/null | tail -1 | grep -c 'no completion for')" = 1 ]
}
last_ack_note="all data through; the ACK of xroce's last message was lost after rxe's tool had exited (the tools' race at the end of a lossy run)"

# vs_host NAME TIMEOUT GUEST_SERVER... -- HOST_CLIENT...: a tool's server in
# the guest, the host's xroce as its client (HOST_CLIENT are xroce's arguments).
vs_host_client() { rowrun _vs_host_client "$@"; }
_vs_host_client() {
	local name=$1 to=$2 t0 srv=() spid src hrc
	shift 2
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	t0=$(now)
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
	elif last_ack_lost "$name" "$src" "/out/logs/$name.host-client.txt"; then
		result "$name" PASS "$t0" "rxe: $(detail "/out/logs/$name.guest-server.txt"); $last_ack_note"
	else
		result "$name" FAIL "$t0" "rxe server exit $src, xroce client exit $hrc: $(grep -v '^ *$' "/out/logs/$name.host-client.txt" 2>/dev/null | tail -1 | cut -c1-100)"
	fi
}

# vs_host_server NAME TIMEOUT GUEST_CLIENT... -- HOST_SERVER...: xroce's
# server on the host, a tool's client in the guest.
vs_host_server() { rowrun _vs_host_server "$@"; }
_vs_host_server() {
	local name=$1 to=$2 t0 cli=() crc hrc
	shift 2
	while [ "$1" != "--" ]; do cli+=("$1"); shift; done
	shift
	t0=$(now)
	[ "${XROCE_RXE_TRACE:-0}" = 1 ] && echo >/sys/kernel/tracing/trace
	if host_start "$name.host-server" "$to" xroce "$@"; then
		crc=$(client_vs_host "$name.host-server" "/out/logs/$name.guest-client.txt" "$to" "${cli[@]}")
		hrc=$(host_wait "$name.host-server" "$to")
	else
		crc="not run" hrc="not started"
	fi
	if [ "$crc" = 0 ] && [ "$hrc" = 0 ]; then
		result "$name" PASS "$t0" "rxe: $(detail "/out/logs/$name.guest-client.txt"); xroce: $(detail "/out/logs/$name.host-server.txt")"
	elif last_ack_lost "$name" "$crc" "/out/logs/$name.host-server.txt"; then
		result "$name" PASS "$t0" "rxe: $(detail "/out/logs/$name.guest-client.txt"); $last_ack_note"
	else
		result "$name" FAIL "$t0" "rxe client exit $crc, xroce server exit $hrc: $(grep -v '^ *$' "/out/logs/$name.host-server.txt" 2>/dev/null | tail -1 | cut -c1-100)"
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
	tcpdump -i eth0 -s 0 -B 65536 -w "/tmp/$p.pcap" udp port 4791 2>"/out/logs/$p.tcpdump.txt" &
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
			if [ "$c.$t" = UC.send_bw ]; then
				# xroce sends 100 x 64 KiB at once, faster than the TCG
				# guest takes them from its ring: UC loses messages and
				# ib_send_bw's server waits for them forever.
				result "$p.perf.$t$sfx.xroce_client" SKIP "$(now)" "UC: xroce's burst outruns the emulated guest's receive ring, a lost message hangs ib_send_bw's server"
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
	t0=$(now)
	sleep 0.5
	kill -INT "$TCPDUMP"
	wait "$TCPDUMP"
	cp "/tmp/$p.pcap" "/out/pcap/$p.pcap"
	rm -f "/tmp/$p.pcap"
	result "$p.tcpdump" PASS "$t0" "$(grep -E 'captured|dropped' "/out/logs/$p.tcpdump.txt" | paste -sd' ')"
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
	for _ in $(seq 100); do
		ip netns exec xa ss -Hltn "sport = :18515" | grep -q . && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
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
	case $m in
	selftest | loss | tap | xroce | xloss | compare) "mode_$m" ;;
	*) result "$m" FAIL "$t0" "unknown mode" ;;
	esac
	echo "$m $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')" >>/out/mode-seconds
	# No tool may outlive its mode (a left-over RC client keeps retransmitting).
	left=$(pgrep -l '^(ibv_|ib_(write|read|send|atomic)_|tcpdump|xroce)' | paste -sd' ')
	if [ -n "$left" ]; then
		result "$m.leftovers" FAIL "$(now)" "still running after the mode: $left"
		pkill -KILL '^(ibv_|ib_(write|read|send|atomic)_|tcpdump|xroce)'
	fi
done
echo "guest: done at $(now)s"
