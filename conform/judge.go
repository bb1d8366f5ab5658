package conform

import (
	"bytes"
	"fmt"

	"github.com/xroce/xroce/bth"
)

func ok(format string, a ...any) Outcome { return Outcome{OK: true, Obs: fmt.Sprintf(format, a...)} }

func fail(code, format string, a ...any) Outcome {
	return Outcome{Code: code, Obs: fmt.Sprintf(format, a...)}
}

// list names answers for an observation.
func list(as []Answer) string {
	if len(as) == 0 {
		return "nothing"
	}
	var b bytes.Buffer
	for i := range as {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 3 && len(as) > 4 {
			fmt.Fprintf(&b, "… %d more", len(as)-3)
			break
		}
		b.WriteString(as[i].String())
	}
	return b.String()
}

// isAck reports whether a is a positive ACKNOWLEDGE.
func isAck(a *Answer) bool { return a.Opcode() == bth.RCAck && a.AETH.Syndrome().IsACK() }

// isNak reports whether a is an ACKNOWLEDGE with a NAK or an RNR NAK.
func isNak(a *Answer) bool { return a.Opcode() == bth.RCAck && !a.AETH.Syndrome().IsACK() }

// expectAck wants an ACK that covers the packet at PSN offset off (a
// coalesced ACK of a later PSN of the step covers it too) and no NAK.
func expectAck(what string, off int) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		want := x.PSN(off)
		last := want
		if len(x.Sent) > 0 {
			last = x.Sent[len(x.Sent)-1]
		}
		for i := range x.Got {
			if isNak(&x.Got[i]) {
				return fail("nak", "%s drew %s", what, list(x.Got))
			}
		}
		for i := range x.Got {
			a := &x.Got[i]
			if isAck(a) && a.BTH.PSN().Diff(want) >= 0 && a.BTH.PSN().Diff(last) <= 0 {
				return ok("%s ACKed (PSN %d)", what, a.BTH.PSN())
			}
		}
		return fail("no-ack", "%s drew %s, want an ACK of PSN %d", what, list(x.Got), want)
	}
}

// expectNak wants one NAK with syndrome syn for the PSN at offset off,
// after at most positive ACKs of earlier PSNs.
func expectNak(what string, syn bth.Syndrome, off int) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		want := x.PSN(off)
		var naks []Answer
		for i := range x.Got {
			a := &x.Got[i]
			switch {
			case isNak(a):
				naks = append(naks, *a)
			case isAck(a) && a.BTH.PSN().Less(want):
			default:
				return fail("answered", "%s drew %s, want %v for PSN %d", what, list(x.Got), syn, want)
			}
		}
		switch {
		case len(naks) == 0:
			if len(x.Got) > 0 {
				return fail("ack", "%s drew %s, want %v for PSN %d", what, list(x.Got), syn, want)
			}
			return fail("silent", "%s drew nothing, want %v for PSN %d", what, syn, want)
		case naks[0].AETH.Syndrome() != syn:
			return fail("syndrome", "%s drew %s, want %v", what, list(naks), syn)
		case naks[0].BTH.PSN() != want:
			return fail("nak-psn", "%s drew %s, want it for PSN %d", what, list(naks), want)
		case len(naks) > 1:
			return fail("nak-repeated", "%s drew %d NAKs: %s", what, len(naks), list(naks))
		}
		return ok("%s: %v PSN %d", what, syn, want)
	}
}

// expectSilence wants no response at all.
func expectSilence(what, code string) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		if len(x.Got) > 0 {
			return fail(code, "%s drew %s, want silence", what, list(x.Got))
		}
		return ok("%s: silence", what)
	}
}

// expectDead wants the QP silent after a fatal NAK: in the error state it
// answers nothing.
func expectDead(x *Ctx) Outcome {
	if len(x.Got) > 0 {
		return fail("qp-alive", "after the NAK a good request drew %s: the QP did not enter the error state", list(x.Got))
	}
	return ok("then a good request drew nothing (QP in error)")
}

// expectRNR wants one RNR NAK for the PSN at offset off with the timer the
// target advertises.
func expectRNR(what string, off int) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		want := x.PSN(off)
		var rnr []Answer
		for i := range x.Got {
			if a := &x.Got[i]; a.Opcode() == bth.RCAck && a.AETH.Syndrome().IsRNRNak() {
				rnr = append(rnr, *a)
			}
		}
		switch {
		case len(rnr) == 0:
			return fail("no-rnr", "%s drew %s, want an RNR NAK for PSN %d", what, list(x.Got), want)
		case len(x.Got) > len(rnr):
			return fail("answered", "%s drew %s, want only an RNR NAK", what, list(x.Got))
		case rnr[0].BTH.PSN() != want:
			return fail("nak-psn", "%s drew %s, want it for PSN %d", what, list(rnr), want)
		}
		code := rnr[0].AETH.Syndrome().Value()
		if x.T.MinRNRTimer != 0 && code != x.T.MinRNRTimer {
			return fail("rnr-timer", "%s drew an RNR NAK with timer code %d (%v), want the advertised %d (%v)", what,
				code, bth.RNRTimerDuration(code), x.T.MinRNRTimer, bth.RNRTimerDuration(x.T.MinRNRTimer))
		}
		return ok("%s: RNR NAK PSN %d timer %v", what, want, bth.RNRTimerDuration(code))
	}
}

// expectRead wants the READ responses of a READ of n bytes at PSN offset
// off: consecutive PSNs, FIRST … LAST (or ONLY), n bytes in all, nothing
// else. The data is kept under name; when name already holds data (an
// earlier read of the same bytes) they must be equal.
func expectRead(what string, off, n int, name string) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		want := x.PSN(off)
		packets := max((n+x.T.MTU-1)/x.T.MTU, 1)
		if len(x.Got) != packets {
			return fail("read-count", "%s drew %s, want %d READ response packets", what, list(x.Got), packets)
		}
		var data []byte
		for i := range x.Got {
			a := &x.Got[i]
			wop := bth.RCReadResponseMiddle
			switch {
			case packets == 1:
				wop = bth.RCReadResponseOnly
			case i == 0:
				wop = bth.RCReadResponseFirst
			case i == packets-1:
				wop = bth.RCReadResponseLast
			}
			if a.Opcode() != wop || a.BTH.PSN() != want.Add(uint32(i)) {
				return fail("read-sequence", "%s drew %s, want %v PSN %d at position %d", what, list(x.Got), wop, want.Add(uint32(i)), i)
			}
			data = append(data, a.Payload...)
		}
		if len(data) != n {
			return fail("read-length", "%s returned %d bytes, want %d", what, len(data), n)
		}
		if prev, seen := x.Read[name]; seen && !bytes.Equal(prev, data) {
			return fail("replay-data", "%s returned other bytes than the first READ", what)
		}
		x.Read[name] = data
		return ok("%s answered: %d B in %d packets", what, n, packets)
	}
}

// noData wants no READ response data: a NAK remote access error or
// silence (a responder may drop a duplicate it does not match).
func noData(what string) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		for i := range x.Got {
			a := &x.Got[i]
			if a.Opcode().IsReadResponse() {
				return fail("replayed-unchecked", "%s drew %s: the replay was not checked again", what, list(x.Got))
			}
			if isNak(a) && a.AETH.Syndrome() != bth.NakRemoteAccessError {
				return fail("syndrome", "%s drew %s, want NAK remote access error or nothing", what, list(x.Got))
			}
		}
		if len(x.Got) == 0 {
			return ok("%s: dropped", what)
		}
		return ok("%s: %s", what, list(x.Got))
	}
}

// expectAtomic wants one ATOMIC ACKNOWLEDGE for the PSN at offset off and
// hands its original value to check.
func expectAtomic(what string, off int, check func(x *Ctx, orig uint64) Outcome) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		want := x.PSN(off)
		if len(x.Got) != 1 || x.Got[0].Opcode() != bth.RCAtomicAck || x.Got[0].BTH.PSN() != want {
			return fail("atomic-ack", "%s drew %s, want one ATOMIC_ACKNOWLEDGE PSN %d", what, list(x.Got), want)
		}
		return check(x, x.Got[0].AtomicAckETH.OrigRemoteData())
	}
}

// all runs judges in order and fails with the first that fails.
func all(js ...func(x *Ctx) Outcome) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		var obs []string
		for _, j := range js {
			o := j(x)
			if !o.OK {
				return o
			}
			obs = append(obs, o.Obs)
		}
		return Outcome{OK: true, Obs: joinObs(obs)}
	}
}

func joinObs(s []string) string {
	var b bytes.Buffer
	for i, o := range s {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(o)
	}
	return b.String()
}
