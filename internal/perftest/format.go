package perftest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The lines and column headers perftest prints.
const (
	ResultLine  = "---------------------------------------------------------------------------------------\n"
	ResultBW    = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	ResultBWMiB = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]" // 25.01
	ResultBWG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	ResultLat   = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	ResultLatD  = " #bytes        #iterations       t_avg[usec]    tps average"
	reportBW    = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n"
	reportBW25  = " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f\n"
	reportBWExt = " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n"
	reportLat   = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n"
	reportLatD  = " %-7d       %d            %-7.2f        %-7.2f\n"
)

// Verb is the operation a test measures, in perftest's order.
type Verb int

// The verbs.
const (
	Send Verb = iota
	Write
	Read
	Atomic
)

func (v Verb) String() string {
	return [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}[v]
}

// Style is a perftest release's output: its banner and its bandwidth
// table. The exchange on the wire is the same for both.
type Style uint8

const (
	// Style45 is perftest 4.5's (Debian bookworm's 4.5+0.17, which says
	// "6.06" on the wire).
	Style45 Style = iota
	// Style2501 is perftest 25.01's (Debian trixie's 25.01.0+0.80,
	// "6.24"): the banner's PCIe and ibv_wr* lines gain a second column
	// (Lock-free, Using DDP), and bandwidth is headed MiB/sec, with two
	// more spaces before the message rate.
	Style2501
)

// StyleOf is the style of the perftest whose version string is v: 25.01's
// from 6.24 on, 4.5's before.
func StyleOf(v string) Style {
	if f, err := strconv.ParseFloat(strings.TrimRight(v, "\x00"), 64); err == nil && f >= 6.24 {
		return Style2501
	}
	return Style45
}

// Version is the version string perftest of this style sends.
func (st Style) Version() string {
	if st == Style2501 {
		return "6.24"
	}
	return Version
}

func (st Style) String() string {
	if st == Style2501 {
		return "25.01"
	}
	return "4.5"
}

// Info is what the banner of a test shows.
type Info struct {
	Verb       Verb
	Atomic     string // "FETCH_AND_ADD" or "CMP_AND_SWAP" (Atomic only)
	Latency    bool   // a latency test (else bandwidth)
	Server     bool
	Device     string
	QPs        int
	Connection string // "RC", "UC", "UD"
	TxDepth    int
	RxDepth    int
	CQMod      int
	MTU        int // bytes
	GIDIndex   int // -1: not shown
	Inline     int
	OutReads   int
	RDMACM     bool // -R: the QPs are connected with rdma_cm
	TOS        int  // -R -T: the data connections' type of service; -1: not shown
	Style      Style
}

// PrintInfo prints perftest's banner (ctx_print_test_info).
func PrintInfo(w io.Writer, in *Info) {
	var b strings.Builder
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(in.Verb.String() + " ")
	if in.Verb == Atomic {
		b.WriteString(in.Atomic + " ")
	}
	if in.Latency {
		b.WriteString("Latency ")
	} else {
		b.WriteString("BW ")
	}
	b.WriteString("Test\n")
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : %s\n", in.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IB\n", in.QPs)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : OFF\n", in.Connection)
	if in.Style == Style2501 {
		b.WriteString(" PCIe relax order: Unsupported\t\tLock-free      : OFF\n")
		b.WriteString(" ibv_wr* API     : OFF\t\tUsing DDP      : OFF\n")
	} else {
		b.WriteString(" PCIe relax order: Unsupported\n")
		b.WriteString(" ibv_wr* API     : OFF\n")
	}
	if !in.Server {
		fmt.Fprintf(&b, " TX depth        : %d\n", in.TxDepth)
	}
	if in.Verb == Send && in.Server {
		fmt.Fprintf(&b, " RX depth        : %d\n", in.RxDepth)
	}
	if !in.Latency {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", in.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", in.MTU)
	b.WriteString(" Link type       : Ethernet\n")
	if in.GIDIndex >= 0 {
		fmt.Fprintf(&b, " GID index       : %d\n", in.GIDIndex)
	}
	if in.Verb != Read && in.Verb != Atomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", in.Inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", in.OutReads)
	}
	if !in.RDMACM {
		b.WriteString(" rdma_cm QPs\t : OFF\n")
		b.WriteString(" Data ex. method : Ethernet\n")
		b.WriteString(ResultLine)
		io.WriteString(w, b.String())
		return
	}
	b.WriteString(" rdma_cm QPs\t : ON\n")
	b.WriteString(" Data ex. method : rdma_cm")
	if in.TOS >= 0 {
		fmt.Fprintf(&b, " \tTOS    : %d", in.TOS)
	}
	if in.Server {
		// perftest prints this once the QPs are connected already.
		b.WriteString("\n" + ResultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP")
	}
	b.WriteString("\n" + ResultLine)
	io.WriteString(w, b.String())
}

// altHex formats v as C's "%#0*x": 0x and zero-padded digits to width
// characters in all, but plain zeros for 0 (C adds no 0x to a zero).
func altHex(v uint64, width int) string {
	if v == 0 {
		return strings.Repeat("0", width)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// PrintDest prints a QP's address as perftest does (ctx_print_pingpong_data),
// for the local side or the remote one. With -R perftest prints with its
// control connection's verb, SEND, whatever the test: no OUT, RKey or
// VAddr; pass Send then.
func PrintDest(w io.Writer, d *Dest, remote bool, verb Verb) {
	side := "local"
	if remote {
		side = "remote"
	}
	s := fmt.Sprintf(" %s address: LID %s QPN %s PSN %s", side, altHex(uint64(d.LID), 4), altHex(uint64(d.QPN), 6), altHex(uint64(d.PSN), 6))
	if verb == Read {
		s += " OUT " + altHex(uint64(d.OutReads), 4)
	}
	if verb == Read || verb == Write {
		s += " RKey " + altHex(uint64(d.RKey), 8) + " VAddr " + altHex(d.VAddr, 16)
	}
	s += "\n GID: "
	for i, g := range d.GID {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprintf("%02d", g)
	}
	io.WriteString(w, s+"\n")
}

// PrintBWHeader prints the column header of a bandwidth table.
func (st Style) PrintBWHeader(w io.Writer, gbits bool) {
	h := ResultBW
	switch {
	case gbits:
		h = ResultBWG
	case st == Style2501:
		h = ResultBWMiB
	}
	io.WriteString(w, ResultLine+h+"\n")
}

// PrintBW prints one bandwidth result line (print_full_bw_report).
func (st Style) PrintBW(w io.Writer, r BWReport, gbits bool) {
	f := reportBW
	switch {
	case gbits && r.Avg < 0.1:
		f = reportBWExt
	case st == Style2501:
		f = reportBW25
	}
	fmt.Fprintf(w, f, r.Size, r.Iters, r.Peak, r.Avg, r.MsgRate)
}

// PrintLatHeader prints the column header of a latency table.
func PrintLatHeader(w io.Writer, duration bool) {
	h := ResultLat
	if duration {
		h = ResultLatD
	}
	io.WriteString(w, ResultLine+h+"\n")
}

// BW computes a bandwidth report from when each message was posted and
// completed (posted[i], completed[i], both from the same origin), in MB/s
// (2^20 bytes) or with gbits in Gbit/s. The peak is the best rate over any
// run of consecutive messages that ends at a completion, checked at every
// cqMod-th message, as perftest does.
func BW(size int, posted, completed []time.Duration, cqMod int, gbits bool) BWReport {
	n := len(completed)
	r := BWReport{Size: uint64(size), Iters: uint64(n)}
	if n == 0 {
		return r
	}
	unit := float64(1 << 20)
	if gbits {
		unit = 125e6
	}
	total := (completed[n-1] - posted[0]).Seconds()
	if total <= 0 {
		return r // no time passed that a clock saw: no rate to report
	}
	r.Avg = float64(size) * float64(n) / total / unit
	r.MsgRate = float64(n) / total / 1e6
	best := completed[n-1] - posted[0]
	cqMod = max(cqMod, 1)
	// A run of messages that took no measurable time (its post and its
	// completion read the same clock tick) says nothing of a rate: skip
	// it rather than divide by almost nothing.
	for i := 0; i < n; i += cqMod {
		for j := i + cqMod - 1; j < n; j += cqMod {
			if t := (completed[j] - posted[i]) / time.Duration(j-i+1); t > 0 && t < best {
				best = t
			}
		}
		if j := n - 1; n%cqMod != 0 {
			if t := (completed[j] - posted[i]) / time.Duration(j-i+1); t > 0 && t < best {
				best = t
			}
		}
	}
	r.Peak = float64(size) / best.Seconds() / unit
	return r
}

// Rate is the report of a run that has no per-message times (a duration
// run, or a receiver, which sees no posts): n messages of size bytes in
// el, the peak equal to the average. A run of no measurable length has
// no rate (zeros), never a huge one.
func Rate(size, n int, el time.Duration, gbits bool) BWReport {
	r := BWReport{Size: uint64(size), Iters: uint64(n)}
	if el <= 0 || n <= 0 {
		return r
	}
	unit := float64(1 << 20)
	if gbits {
		unit = 125e6
	}
	r.Avg = float64(size) * float64(n) / el.Seconds() / unit
	r.Peak = r.Avg
	r.MsgRate = float64(n) / el.Seconds() / 1e6
	return r
}

// Lat is a latency report.
type Lat struct {
	Size                   int
	Iters                  int
	Min, Max, Typical, Avg float64 // µs
	Stdev, P99, P999       float64
}

// Latency computes perftest's latency report from the times at which
// each of iters messages was posted (print_report_lat): the differences of
// consecutive ones, halved for round trips (rtt), sorted, the two largest
// dropped; typical is the median.
func Latency(size int, posted []time.Duration, rtt bool) Lat {
	l := Lat{Size: size, Iters: len(posted)}
	if len(posted) < 4 {
		return l
	}
	q := 1.0
	if rtt {
		q = 2
	}
	delta := make([]float64, len(posted)-1)
	for i := range delta {
		delta[i] = float64(posted[i+1]-posted[i]) / 1e3 / q
	}
	slices.Sort(delta)
	m := len(delta) - 2
	if m%2 == 0 { // (m-1)%2 != 0
		l.Typical = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		l.Typical = delta[m/2]
	}
	var sum float64
	for _, d := range delta[:m] {
		sum += d
	}
	l.Avg = sum / float64(m)
	var ss float64
	for _, d := range delta[:m] {
		// perftest squares the difference truncated to an integer
		// (int temp_var); so does this, for the same figures.
		v := math.Trunc(l.Avg - d)
		ss += v * v
	}
	l.Stdev = math.Sqrt(ss / float64(m))
	l.Min, l.Max = delta[0], delta[m]
	l.P99 = delta[int(math.Ceil(float64(m)*0.99))]
	l.P999 = delta[int(math.Ceil(float64(m)*0.999))]
	return l
}

// PrintLat prints one latency result line.
func PrintLat(w io.Writer, l Lat) {
	fmt.Fprintf(w, reportLat, l.Size, l.Iters, l.Min, l.Max, l.Typical, l.Avg, l.Stdev, l.P99, l.P999)
}

// PrintLatDuration prints the result line of a latency test run for a
// duration: average latency and transactions per second.
func PrintLatDuration(w io.Writer, size int, iters int, elapsed time.Duration, rtt bool) {
	q := 1.0
	if rtt {
		q = 2
	}
	avg := 0.0
	if iters > 0 {
		avg = float64(elapsed.Microseconds()) / float64(iters) / q
	}
	fmt.Fprintf(w, reportLatD, size, iters, avg, float64(iters)/elapsed.Seconds())
}
