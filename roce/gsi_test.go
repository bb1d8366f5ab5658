package roce

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/xroce/xroce/qp"
)

// gsiSide makes d's GSI QP at RTS with a registered buffer.
func gsiSide(t *testing.T, d *Device) *side {
	t.Helper()
	s := &side{d: d}
	var err error
	if s.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(QPConfig{Type: UD, GSI: true, SendCQ: s.cq, RecvCQ: s.cq}); err != nil {
		t.Fatal(err)
	}
	if s.qp.QPN() != qp.GSIQPN {
		t.Fatalf("GSI QPN %#x", s.qp.QPN())
	}
	if err := s.qp.Connect(context.Background(), Endpoint{}, Endpoint{}, ConnectOptions{QKey: qp.GSIQKey}); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, 4096)
	if s.mr, err = s.pd.RegMR(s.buf, AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGSI: each device has one QP 1, and two of them exchange 256-byte
// datagrams with the well-known Q_Key; the receiver learns the sender's MAC.
func TestGSI(t *testing.T) {
	da, db := pipeDevices(t, 2, noFaults, Config{})
	a, b := gsiSide(t, da), gsiSide(t, db)
	if _, err := a.pd.CreateQP(QPConfig{Type: UD, GSI: true, SendCQ: a.cq, RecvCQ: a.cq}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second GSI QP: %v", err)
	}
	if _, err := a.pd.CreateQP(QPConfig{Type: RC, GSI: true, SendCQ: a.cq, RecvCQ: a.cq}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("RC GSI QP: %v", err)
	}
	if err := b.qp.PostRecv(&RecvWR{ID: 7, SGL: []SGE{b.mr.SGE(0, 296)}}); err != nil {
		t.Fatal(err)
	}
	for i := range 256 {
		a.buf[i] = byte(i)
	}
	av, err := da.Resolve(context.Background(), ipB)
	if err != nil {
		t.Fatal(err)
	}
	wr := SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 256)}, AV: &av, RemoteQPN: qp.GSIQPN, RemoteQKey: qp.GSIQKey}
	if err := a.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	want(t, a.cq, WCSend, WCSuccess)
	wc := want(t, b.cq, WCRecv, WCSuccess)
	if wc.ByteLen != 296 || wc.SrcQP != qp.GSIQPN || !bytes.Equal(wc.SrcMAC[:], macA) || !bytes.Equal(b.buf[40:296], a.buf[:256]) {
		t.Fatalf("GSI receive %+v", wc)
	}
}
