package conform

import (
	"slices"
	"testing"
)

// TestConformCorrectResponder runs every check against qp's responder in each
// setup: each passes or cannot run there, and each runs in some setup.
func TestConformCorrectResponder(t *testing.T) {
	ran := map[string]bool{}
	for _, su := range setups {
		for _, c := range Checks() {
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
		if !ran[c.Name] {
			t.Errorf("%s never ran against a correct responder", c.Name)
		}
	}
}

// TestConformWrongResponders runs each deliberately wrong responder against the
// checks it breaks: each of them must FAIL, in some setup. Every check
// must be broken by some wrong responder: a check that cannot fail does
// not count.
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
		if !broken[c.Name] {
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

// TestConformBatchedReads documents xroce's deviation in resp.rd-atomic-limit:
// READs beyond its responder resources that arrive in one receive batch
// overwrite the oldest resource before its response is sent.
func TestConformBatchedReads(t *testing.T) {
	s := newSim(t, setups[0])
	s.batch = true
	tgt := s.target
	r := Run(s, find("resp.rd-atomic-limit"), &tgt, framer{}, puppetQPN)
	if r.Verdict != Known {
		t.Fatalf("%v: %s, want KNOWN", r.Verdict, r.Observed)
	}
	t.Logf("%v: %s (%s)", r.Verdict, r.Observed, r.Note)
}
