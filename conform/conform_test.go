package conform

import (
	"slices"
	"strings"
	"testing"
)

// TestConformCorrectResponder runs every check against qp's responder in each
// setup: each passes or cannot run there, and each runs in some setup.
func TestConformCorrectResponder(t *testing.T) {
	ran := map[string]bool{}
	for _, su := range setups {
		for _, c := range Checks() {
			if c.IsRequester() {
				continue
			}
			t.Run(su.name+"/"+c.Name, func(t *testing.T) {
				r := runSim(t, c, su, wrong{})
				t.Logf("%v: %s", r.Verdict, r.Observed)
				switch r.Verdict {
				case Pass:
					ran[c.Name] = true
				case Skip:
				default:
					t.Errorf("%s against qp's responder: %v: %s", c.Name, r.Verdict, r.Observed)
				}
			})
		}
	}
	for _, c := range Checks() {
		if !c.IsRequester() && !ran[c.Name] && !optional[c.Name] {
			t.Errorf("%s never ran against a correct responder", c.Name)
		}
	}
}

// optional are the checks of what a responder may leave out, which SKIP
// against package qp's: each has a test of its own with a responder that
// has it. (resp.cnp was one until qp got its notification point.)
var optional = map[string]bool{}

// TestConformCNP: qp's notification point answers a CE mark with a CNP to
// the requester's QP and resp.cnp passes; a responder without one (its
// CNPs dropped) makes the check SKIP, saying so.
func TestConformCNP(t *testing.T) {
	c := find("resp.cnp")
	r := runSim(t, c, setups[0], wrong{})
	if r.Verdict != Pass || !strings.Contains(r.Observed, "a CNP to the requester's QP") {
		t.Errorf("against qp: %v: %s, want PASS", r.Verdict, r.Observed)
	}
	r = runSim(t, c, setups[0], wrong{out: cnpTo(-1)})
	if r.Verdict != Skip || !strings.Contains(r.Observed, "ACKed") || !strings.Contains(r.Observed, "no CNP") {
		t.Errorf("without a notification point: %v: %s, want SKIP, the request ACKed and no CNP", r.Verdict, r.Observed)
	}
}

func TestConformWrongResponders(t *testing.T) {
	broken := map[string]bool{}
	for _, w := range wrongs {
		for _, name := range w.fails {
			c := find(name)
			if c == nil {
				t.Fatalf("%s: no check %s", w.name, name)
			}
			t.Run(w.name+"/"+name, func(t *testing.T) {
				var got []string
				for _, su := range setups {
					r := runSim(t, c, su, w)
					got = append(got, su.name+": "+r.Verdict.String()+" "+r.Observed)
					if r.Verdict == Fail {
						broken[name] = true
						t.Logf("%s: FAIL: %s", su.name, r.Observed)
						return
					}
				}
				t.Errorf("a responder that %s passes %s: %q", w.name, name, got)
			})
		}
	}
	for _, c := range Checks() {
		if !c.IsRequester() && !broken[c.Name] {
			t.Errorf("no wrong responder makes %s fail", c.Name)
		}
	}
}

func find(name string) *Check {
	i := slices.IndexFunc(Checks(), func(c *Check) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return Checks()[i]
}

// TestConformBatchedReads: READs beyond the responder resources that
// arrive in one receive batch, before any response could be sent. Package
// qp answers the READs within the limit, in order, then NAKs the first one
// beyond it Invalid Request; it used to overwrite the oldest READ's
// resource, which went unanswered (this check's "oldest-overwritten").
func TestConformBatchedReads(t *testing.T) {
	s := newSim(t, setups[0])
	s.batch = true
	tgt := s.target
	r := Run(s, find("resp.rd-atomic-limit"), &tgt, framer{}, puppetQPN)
	if r.Verdict != Pass || !strings.Contains(r.Observed, "4 READs answered, then NAK invalid request") {
		t.Fatalf("%v: %s, want PASS with the fifth READ NAKed", r.Verdict, r.Observed)
	}
	t.Logf("%v: %s", r.Verdict, r.Observed)
}
