package qp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/xroce/xroce/link"
)

const (
	localKey  = 1
	remoteKey = 2
	localBase = 0x1000_0000
	remBase   = 0x7000_0000
)

// simOp is one work request of the workload and what it should produce.
type simOp struct {
	wr       SendWR
	size     int
	data     []byte // SEND/WRITE payload, READ expected data
	dst      uint64 // local address of READ or atomic results
	remote   uint64 // WRITE target in the peer's remote region
	wantOrig uint64 // atomics: the value the peer had
	recv     bool   // consumes a receive request at the peer
}

// sideLoad is the traffic one side sends and what its peer must see.
type sideLoad struct {
	ops      []simOp
	recvs    []int // indexes of ops that consume a receive request, in order
	posted   int   // receive requests the peer has posted
	recvDone int
	sendDone int
}

type bump struct{ next, end uint64 }

func (b *bump) take(n int) uint64 {
	a := b.next
	b.next += uint64(n+7) &^ 7
	if b.next > b.end {
		panic("sim region too small")
	}
	return a
}

func randSize(rng *rand.Rand, mtu int, big bool) int {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return []int{1, 4, mtu - 1, mtu, mtu + 1, 2 * mtu, 3*mtu - 1}[rng.IntN(7)]
	case 2:
		if big {
			return 1 + rng.IntN(3<<20)
		}
	}
	return rng.IntN(16 << 10)
}

type simCfg struct {
	typ    Type
	ops    int
	big    bool
	faults faults
	psnA   uint32
	psnB   uint32
	mtu    MTU
	window int // receive requests kept posted (RNR when small)
	pipe   *[2]link.Faults
}

// runSim runs a random bidirectional workload and checks every completion
// and every byte.
func runSim(t *testing.T, seed uint64, c simCfg) (end time.Duration, frames int) {
	n := newSimNetMTU(t, seed, c.faults, c.mtu)
	if c.pipe != nil {
		n.usePipe(seed, c.pipe[0], c.pipe[1])
	}
	rng := rand.New(rand.NewPCG(seed, 42))
	a, b, cqs := connect(t, n, c.typ, c.psnA, c.psnB, c.mtu, nil)
	qps := [2]*QP{a, b}
	mtu := c.mtu.Bytes()
	const regionSize = 16 << 20
	var loads [2]sideLoad
	var lb, rb [2]bump
	for i, end := range n.ends {
		end.mem.add(localKey, localBase, regionSize, AccessLocalWrite)
		r := end.mem.add(remoteKey, remBase, regionSize, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
		binary.LittleEndian.PutUint64(r.buf[0:], uint64(1000*(i+1)))
		binary.LittleEndian.PutUint64(r.buf[8:], uint64(7*(i+1)))
		lb[i] = bump{localBase, localBase + regionSize}
		rb[i] = bump{remBase + 16, remBase + regionSize}
	}
	// Build the workload.
	var finalCounter, finalCAS [2]uint64 // what the peer's atomic words must end as
	for i := range 2 {
		peer := n.ends[1-i]
		peerRem := peer.mem.regions[remoteKey]
		counter := binary.LittleEndian.Uint64(peerRem.buf[0:])
		cas := binary.LittleEndian.Uint64(peerRem.buf[8:])
		mem := n.ends[i].mem.regions[localKey]
		big := c.big
		for k := range c.ops {
			var op simOp
			kinds := []WROpcode{WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead, WRAtomicFetchAdd, WRAtomicCmpAndSwp}
			if c.typ == UC {
				kinds = kinds[:4]
			}
			if c.typ == UD {
				kinds = kinds[:2]
			}
			kind := kinds[rng.IntN(len(kinds))]
			op.size = randSize(rng, mtu, big && kind != WRSend && kind != WRSendWithImm || big && rng.IntN(4) == 0)
			if op.size > 1<<20 {
				big = false // one big message per side is plenty
			}
			if c.typ == UD {
				op.size = rng.IntN(mtu + 1)
			}
			op.wr = SendWR{ID: uint64(k), Opcode: kind, Flags: SendSignaled, Imm: rng.Uint32()}
			if rng.IntN(8) == 0 {
				op.wr.Flags |= SendFence
			}
			if rng.IntN(8) == 0 {
				op.wr.Flags |= SendSolicited
			}
			switch kind {
			case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
				op.data = make([]byte, op.size)
				for j := range op.data {
					op.data[j] = byte(rng.Uint32())
				}
				src := lb[i].take(op.size)
				copy(mem.buf[src-localBase:], op.data)
				op.wr.SGL = splitSGL(rng, src, op.size)
				if op.size <= 256 && rng.IntN(3) == 0 {
					op.wr.Flags |= SendInline
				}
				if kind.isWrite() {
					op.remote = rb[1-i].take(op.size)
					op.wr.RemoteAddr, op.wr.RKey = op.remote, remoteKey
				}
				op.recv = kind.isSend() || kind == WRRDMAWriteWithImm
			case WRRDMARead:
				srcAddr := rb[1-i].take(op.size)
				op.data = make([]byte, op.size)
				for j := range op.data {
					op.data[j] = byte(rng.Uint32())
				}
				copy(peerRem.buf[srcAddr-remBase:], op.data)
				op.dst = lb[i].take(op.size)
				op.wr.SGL = splitSGL(rng, op.dst, op.size)
				op.wr.RemoteAddr, op.wr.RKey = srcAddr, remoteKey
			case WRAtomicFetchAdd:
				op.size = 8
				add := uint64(rng.IntN(1000))
				op.wr.RemoteAddr, op.wr.RKey, op.wr.CompareAdd = remBase, remoteKey, add
				op.wantOrig = counter
				counter += add
				op.dst = lb[i].take(8)
				op.wr.SGL = []SGE{{Addr: op.dst, Length: 8, LKey: localKey}}
			case WRAtomicCmpAndSwp:
				op.size = 8
				op.wr.RemoteAddr, op.wr.RKey = remBase+8, remoteKey
				op.wantOrig = cas
				op.wr.CompareAdd, op.wr.Swap = cas, rng.Uint64()
				if rng.IntN(3) == 0 {
					op.wr.CompareAdd++ // fails: nothing swapped
				} else {
					cas = op.wr.Swap
				}
				op.dst = lb[i].take(8)
				op.wr.SGL = []SGE{{Addr: op.dst, Length: 8, LKey: localKey}}
			}
			if c.typ == UD {
				av := simAV(i)
				op.wr.AV = &av
				op.wr.RemoteQPN, op.wr.RemoteQKey = qps[1-i].QPN(), 0x11111111
			}
			if op.recv {
				loads[i].recvs = append(loads[i].recvs, k)
			}
			loads[i].ops = append(loads[i].ops, op)
		}
		finalCounter[i], finalCAS[i] = counter, cas
	}
	// Receive buffers: each side keeps a few receive requests posted for
	// its peer's messages.
	recvAddr := [2][]uint64{}
	postRecvs := func() {
		for i := range 2 {
			l := &loads[1-i] // what side i receives
			for l.posted < len(l.recvs) && l.posted-l.recvDone < c.window {
				op := &l.ops[l.recvs[l.posted]]
				sz := op.size + rng.IntN(64)
				if c.typ == UD {
					sz += grhSize
				}
				addr := lb[i].take(sz)
				recvAddr[i] = append(recvAddr[i], addr)
				err := qps[i].PostRecv(&RecvWR{ID: uint64(l.posted), SGL: splitSGL(rng, addr, sz)})
				if err != nil {
					t.Fatalf("seed %d: post recv: %v", seed, err)
				}
				l.posted++
			}
		}
	}
	postRecvs()
	// Post sends, as many as the send queue takes, as it drains.
	next := [2]int{}
	postSends := func() {
		for i := range 2 {
			for next[i] < len(loads[i].ops) {
				if err := qps[i].PostSend(&loads[i].ops[next[i]].wr); err != nil {
					break
				}
				next[i]++
			}
		}
	}
	checkCQs := func() {
		for i := range 2 {
			l := &loads[i]
			scq := cqs[2*i]
			for _, wc := range scq.wcs {
				k := l.sendDone
				if k >= len(l.ops) {
					t.Fatalf("seed %d side %d: extra send completion %+v", seed, i, wc)
				}
				op := &l.ops[k]
				if wc.ID != op.wr.ID || wc.Status != WCSuccess || wc.Opcode != wcOpcodeOf(op.wr.Opcode) || wc.QPN != qps[i].QPN() {
					t.Fatalf("seed %d side %d: send completion %d = %+v (status %v), want op %v id %d", seed, i, k, wc, wc.Status, op.wr.Opcode, op.wr.ID)
				}
				mem := n.ends[i].mem.regions[localKey].buf
				switch {
				case op.wr.Opcode == WRRDMARead:
					if got := mem[op.dst-localBase : op.dst-localBase+uint64(op.size)]; !bytes.Equal(got, op.data) {
						t.Fatalf("seed %d side %d: READ %d of %d bytes: data differs", seed, i, k, op.size)
					}
				case op.wr.Opcode.isAtomic():
					if got := binary.LittleEndian.Uint64(mem[op.dst-localBase:]); got != op.wantOrig {
						t.Fatalf("seed %d side %d: atomic %d returned %d, want %d", seed, i, k, got, op.wantOrig)
					}
				}
				l.sendDone++
			}
			scq.wcs = scq.wcs[:0]
			rcq := cqs[2*(1-i)+1] // the peer's receive CQ
			for _, wc := range rcq.wcs {
				j := l.recvDone
				if j >= len(l.recvs) {
					t.Fatalf("seed %d side %d: extra receive completion %+v", seed, 1-i, wc)
				}
				op := &l.ops[l.recvs[j]]
				wantOp, wantLen := WCRecv, uint32(op.size)
				if op.wr.Opcode == WRRDMAWriteWithImm {
					wantOp = WCRecvRDMAWithImm
				}
				if c.typ == UD {
					wantLen += grhSize
				}
				if wc.Status != WCSuccess || wc.ID != uint64(j) || wc.Opcode != wantOp || wc.ByteLen != wantLen {
					t.Fatalf("seed %d side %d: receive completion %d = %+v (status %v), want %v of %d bytes", seed, 1-i, j, wc, wc.Status, wantOp, wantLen)
				}
				hasImm := op.wr.Opcode == WRSendWithImm || op.wr.Opcode == WRRDMAWriteWithImm
				if hasImm != (wc.Flags&WCWithImm != 0) || hasImm && wc.Imm != op.wr.Imm {
					t.Fatalf("seed %d: receive completion %d: imm %v %#x, want %v %#x", seed, j, wc.Flags&WCWithImm != 0, wc.Imm, hasImm, op.wr.Imm)
				}
				if op.wr.Opcode.isSend() {
					addr := recvAddr[1-i][j] - localBase
					if c.typ == UD {
						addr += grhSize
					}
					got := n.ends[1-i].mem.regions[localKey].buf[addr : addr+uint64(op.size)]
					if !bytes.Equal(got, op.data) {
						t.Fatalf("seed %d: message %d (%v, %d bytes) arrived corrupted", seed, l.recvs[j], op.wr.Opcode, op.size)
					}
				}
				l.recvDone++
			}
			rcq.wcs = rcq.wcs[:0]
		}
	}
	done := func() bool {
		for i := range 2 {
			if loads[i].sendDone < len(loads[i].ops) || loads[i].recvDone < len(loads[i].recvs) {
				return false
			}
		}
		return true
	}
	const limit = 120 * time.Second
	for !done() {
		postSends()
		postRecvs()
		more := n.step()
		checkCQs()
		if !more && !done() {
			t.Fatalf("seed %d: hang at %v: nothing scheduled; side 0 %d/%d sends %d/%d recvs, side 1 %d/%d sends %d/%d recvs; states %v %v",
				seed, n.now, loads[0].sendDone, len(loads[0].ops), loads[1].recvDone, len(loads[0].recvs),
				loads[1].sendDone, len(loads[1].ops), loads[0].recvDone, len(loads[1].recvs), a.debugString(), b.debugString())
		}
		if n.now > limit {
			t.Errorf("seed %d: no completion after %v of simulated time: side 0 %d/%d, side 1 %d/%d", seed, limit,
				loads[0].sendDone, len(loads[0].ops), loads[1].sendDone, len(loads[1].ops))
			t.Fatalf("%s\n%s\n%s", a.debugString(), b.debugString(), statsOf(n))
		}
	}
	// Every WRITE landed, every atomic applied once, no guard touched.
	for i := range 2 {
		peerRem := n.ends[1-i].mem.regions[remoteKey]
		for k, op := range loads[i].ops {
			if op.wr.Opcode.isWrite() {
				if got := peerRem.buf[op.remote-remBase : op.remote-remBase+uint64(op.size)]; !bytes.Equal(got, op.data) {
					t.Fatalf("seed %d side %d: WRITE %d of %d bytes: data differs", seed, i, k, op.size)
				}
			}
		}
		if c.typ == RC {
			if got := binary.LittleEndian.Uint64(peerRem.buf[0:]); got != finalCounter[i] {
				t.Fatalf("seed %d side %d: FETCH_ADD counter = %d, want %d: an atomic ran twice or never", seed, i, got, finalCounter[i])
			}
			if got := binary.LittleEndian.Uint64(peerRem.buf[8:]); got != finalCAS[i] {
				t.Fatalf("seed %d side %d: CMP_SWP word = %#x, want %#x", seed, i, got, finalCAS[i])
			}
		}
		for _, r := range n.ends[i].mem.regions {
			if !r.guardsIntact() {
				t.Fatalf("seed %d: memory outside region %d was written", seed, r.key)
			}
		}
	}
	if n.pipe[0] != nil {
		st := n.pipe[0].Stats()
		if st.TxFrames == 0 || n.pipe[1].Stats().RxFrames == 0 {
			t.Fatalf("seed %d: nothing went over the pipe: %+v", seed, st)
		}
		if testing.Verbose() {
			t.Logf("pipe a→b: %d frames, faults %v", st.TxFrames, st.Extra)
		}
	}
	if c.typ == RC && (a.State() != StateRTS || b.State() != StateRTS) {
		t.Fatalf("seed %d: states %v %v at the end, want RTS", seed, a.State(), b.State())
	}
	return n.now, n.sent
}

func splitSGL(rng *rand.Rand, addr uint64, n int) []SGE {
	parts := 1 + rng.IntN(3)
	var sgl []SGE
	for p := range parts {
		l := n
		if p < parts-1 && n > 0 {
			l = rng.IntN(n + 1)
		}
		sgl = append(sgl, SGE{Addr: addr, Length: uint32(l), LKey: localKey})
		addr += uint64(l)
		n -= l
	}
	return sgl
}

func TestSimRCClean(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runSim(t, seed, simCfg{typ: RC, ops: 40, mtu: MTU1024, window: 8, psnA: 100, psnB: 5000,
				faults: faults{delay: 2 * time.Microsecond}})
		})
	}
}

func faultsFor(rng *rand.Rand) faults {
	p := func() float64 { return rng.Float64() * 0.2 }
	return faults{loss: p(), dup: p(), corrupt: p(), reorder: p(), delay: time.Duration(1+rng.IntN(5)) * time.Microsecond,
		jitter: time.Duration(rng.IntN(20)) * time.Microsecond}
}

// simSeeds gives how many seeds a simulation runs; QP_SIM_SEEDS=n runs n
// (for long soaks). Under the race detector a few do (raceEnabled).
func simSeeds(short, long int) int {
	if n, err := strconv.Atoi(os.Getenv("QP_SIM_SEEDS")); err == nil && n > 0 {
		return n
	}
	if raceEnabled {
		return min(short, 3)
	}
	if testing.Short() {
		return short
	}
	return long
}

func TestSimRCLossy(t *testing.T) {
	for seed := range uint64(simSeeds(20, 60)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := simCfg{typ: RC, ops: 30, mtu: []MTU{MTU256, MTU1024, MTU4096}[seed%3], window: 1 + rng.IntN(8),
				psnA: rng.Uint32N(1 << 24), psnB: rng.Uint32N(1 << 24), faults: faultsFor(rng), big: seed%10 == 3}
			if c.big {
				c.mtu = MTU4096 // keeps multi-MiB messages over 20% loss to a few seconds
			}
			if seed%2 == 0 {
				// PSN wrap-around at 2^24.
				c.psnA, c.psnB = 1<<24-1-rng.Uint32N(300), 1<<24-1-rng.Uint32N(300)
			}
			runSim(t, seed, c)
		})
	}
}

func TestSimUCClean(t *testing.T) {
	for seed := range uint64(simSeeds(4, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 9))
			runSim(t, seed, simCfg{typ: UC, ops: 40, mtu: []MTU{MTU256, MTU1024, MTU4096}[seed%3], window: 64,
				psnA: 1<<24 - 1 - rng.Uint32N(100), psnB: rng.Uint32N(1 << 24), faults: faults{delay: time.Microsecond}})
		})
	}
}

func TestSimUDClean(t *testing.T) {
	for seed := range uint64(simSeeds(4, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runSim(t, seed, simCfg{typ: UD, ops: 40, mtu: []MTU{MTU256, MTU1024, MTU4096}[seed%3], window: 64,
				faults: faults{delay: time.Microsecond}})
		})
	}
}

func TestSimRCIPv6(t *testing.T) {
	saved := simIPs
	simIPs = [2]netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")}
	t.Cleanup(func() { simIPs = saved })
	for seed := range uint64(simSeeds(3, 10)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 17))
			runSim(t, seed, simCfg{typ: RC, ops: 30, mtu: MTU1024, window: 4, psnA: rng.Uint32N(1 << 24), psnB: rng.Uint32N(1 << 24),
				faults: faultsFor(rng)})
		})
	}
}

func TestSimUDIPv6(t *testing.T) {
	saved := simIPs
	simIPs = [2]netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")}
	t.Cleanup(func() { simIPs = saved })
	runSim(t, 1, simCfg{typ: UD, ops: 30, mtu: MTU2048, window: 64, faults: faults{delay: time.Microsecond}})
}

// TestSimRCPipe runs the workload over the project's in-memory link
// (link.Pipe) with its own seeded faults on a fake clock, through the
// Link API (Alloc, Transmit, Receive, Release) the verbs layer will use.
func TestSimRCPipe(t *testing.T) {
	for seed := range uint64(simSeeds(6, 20)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 23))
			lf := func() link.Faults {
				p := func() float64 { return rng.Float64() * 0.2 }
				return link.Faults{Loss: p(), Duplicate: p(), Corrupt: p(), Reorder: p(), ReorderGap: 1 + rng.IntN(4),
					Delay: time.Duration(1+rng.IntN(5)) * time.Microsecond, Jitter: time.Duration(rng.IntN(3)) * time.Microsecond}
			}
			runSim(t, seed, simCfg{typ: RC, ops: 30, mtu: []MTU{MTU256, MTU1024, MTU4096}[seed%3], window: 1 + rng.IntN(6),
				psnA: 1<<24 - 1 - rng.Uint32N(200), psnB: rng.Uint32N(1 << 24), pipe: &[2]link.Faults{lf(), lf()}})
		})
	}
}

// TestSimDeterministic: the same seed gives the same run, to the frame and
// the nanosecond.
func TestSimDeterministic(t *testing.T) {
	c := simCfg{typ: RC, ops: 30, mtu: MTU1024, window: 2, psnA: 1<<24 - 10, psnB: 3,
		faults: faults{loss: 0.1, dup: 0.1, corrupt: 0.1, reorder: 0.1, delay: time.Microsecond, jitter: 5 * time.Microsecond}}
	end1, n1 := runSim(t, 5, c)
	end2, n2 := runSim(t, 5, c)
	if end1 != end2 || n1 != n2 {
		t.Fatalf("seed 5 twice: %v and %d frames, then %v and %d frames", end1, n1, end2, n2)
	}
}
