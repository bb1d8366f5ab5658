package statcount

import "testing"

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"RxFrames": "rx_frames", "RNRNaksRx": "rnr_naks_rx", "RxBadICRC": "rx_bad_icrc", "MRs": "mrs",
		"LinkRxFrames": "link_rx_frames", "TxNoBuffer": "tx_no_buffer", "ToError": "to_error",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCounters(t *testing.T) {
	type s struct {
		RxFrames uint64
		MRs      int
		Name     string
		Neg      int
		hidden   uint64
	}
	cs := Of(s{RxFrames: 3, MRs: 2, Name: "x", Neg: -1, hidden: 9})
	if len(cs) != 3 || cs[0].Name != "rx_frames" || cs[0].Value != 3 || cs[1].Name != "mrs" || cs[2].Value != 0 {
		t.Errorf("counters = %+v", cs)
	}
}
