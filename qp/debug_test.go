package qp

import "fmt"

func (q *QP) debugString() string {
	s := fmt.Sprintf("qp %#x %v sq h%d r%d t%d rdOut %d reqPSN %d sentPSN %d compPSN %d timer %+v ePSN %d nak %v in %+v resActive %d rq %d/%d",
		q.qpn, q.state, q.sqHead, q.sqReq, q.sqTail, q.rdOut, q.reqPSN, q.sentPSN, q.compPSN, q.timer, q.ePSN, q.nakSent, q.in.active, q.resActive, q.rqHead, q.rqTail)
	if q.sqHead != q.sqTail {
		w := q.sqAt(q.sqHead)
		s += fmt.Sprintf(" head{%v len %d started %v first %d last %d send %d}", w.wr.Opcode, w.length, w.started, w.firstPSN, w.lastPSN, w.sendPSN)
	}
	return s
}

func statsOf(n *simNet) string {
	s := ""
	for i, e := range n.ends {
		st := e.e.Stats()
		s += fmt.Sprintf("end %d: rx %d drop %d badicrc %d tx %d retrans %d timeouts %d rnrRx %d rnrTx %d seqRx %d seqTx %d errTx %d dups %d\n", i,
			st.RxFrames.Load(), st.RxDropped.Load(), st.RxBadICRC.Load(), st.TxFrames.Load(), st.Retransmits.Load(), st.Timeouts.Load(),
			st.RNRNaksRx.Load(), st.RNRNaksTx.Load(), st.SeqNaksRx.Load(), st.SeqNaksTx.Load(), st.ErrNaksTx.Load(), st.Duplicates.Load())
	}
	return s
}
