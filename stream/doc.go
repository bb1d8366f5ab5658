// Package stream gives Go programs byte streams (net.Conn and net.Listener)
// over xroce's RC queue pairs, in the spirit of the Sockets Direct Protocol
// (InfiniBand Architecture Specification Vol. 1 Release 1.4, Annex A4) and
// of the stream mode of the Extended Sockets API (OpenGroup/UNH EXS): a
// program swaps net.Dial and net.Listen for Dial and Listen and keeps its
// io.Reader/io.Writer code.
//
// # Connection setup
//
// Listen opens a TCP listener on addr: the side channel. Dial connects to
// it; on the TCP connection the client sends an 8-byte hello ("XRS1" and
// its receive ring size, big-endian uint32) and the server answers with
// its own; then each side creates a PD, a CQ, one RC QP, its receive ring
// (registered for remote write) and its send staging buffer, and the QPs
// are brought to RTS by roce.QP.ConnectTCP with roce.XroceCodec, which
// carries QPN, first PSN, GID, MTU and the ring's address and rkey. Each
// side then posts its receive requests and writes one byte 'R'; after
// reading the peer's 'R' it knows the peer can take messages, and the TCP
// connection is closed.
//
// ListenCM and DialCM do without the side channel: they connect through
// RDMA CM (package cm), the way rdma_cm programs connect. The client's
// hello, extended with its ring's address and R_Key (20 bytes: "XRS1",
// ring size, address, key, big-endian), is the private data of the REQ;
// the server's is the private data of the REP. Each side moves its QP to
// INIT and posts its receive requests before it connects or accepts, so
// no ready byte is needed; Close ends the CM connection (DREQ) too.
//
// # Messages
//
// Every message is an RDMA WRITE WITH IMMEDIATE (IBTA Vol. 1 §9.4.3), so
// each consumes one of the receiver's receive requests (zero-length
// scatter lists: the payload goes where the RETH says) and completes there
// with the immediate and the byte count. The 32-bit immediate is
//
//	 31   29 28        22 21                            0
//	+-------+------------+-------------------------------+
//	| kind  | msg credit |        byte credit            |
//	+-------+------------+-------------------------------+
//
// kind: 0 DATA (the payload was written into the receiver's ring at the
// ring's tail), 1 CREDIT (no payload), 2 FIN (no payload: the sender will
// send no more data, CloseWrite), 3..7 the direct path (ADVERT, DIRECT,
// DECLINE, WITHDRAW, DECLINE-SMALL; see below). Every message carries credits back to its
// receiver: how many receive requests the sender has re-posted (at most
// 127) and how many ring bytes its reader has consumed (at most 4 MiB - 1)
// since it last said so.
//
// # The ring and credits (indirect path)
//
// Each side has a receive ring of R bytes (Config.RingSize, 1 MiB by
// default). The writer keeps a mirror of the peer's tail: it copies a Write
// into its staging buffer at the same offset (staging and peer ring have
// the same size) and writes that span into the peer's ring, splitting at
// the ring's end, so the receiver needs no offsets: it advances its tail
// by each DATA message's byte count, and RC's ordering makes the two
// agree. Flow control is by credits, so a sender never overruns the ring
// and never meets an RNR NAK in steady state:
//
//   - Byte credits: the writer may have at most R bytes written and not
//     yet reported consumed by the peer's reader; staging bytes are reused
//     only after both the peer's credit and the local send completion.
//   - Message credits: each side posts Q receive requests (128) and re-posts
//     each as soon as its completion is handled; the peer starts with Q
//     message credits. A DATA or FIN message needs two credits, so that the
//     last one is kept for a message that returns credits; a CREDIT message
//     needs one, and if it is the last one it must return at least one
//     message credit. Credits are returned piggybacked on every message,
//     and by a CREDIT message when Q/4 receive requests or R/4 ring bytes
//     are owed. With these rules two sides that write at once cannot both
//     be left without a credit with none on the way (each last credit
//     carries one back), and a writer blocked on bytes is always owed
//     fewer than R/4 bytes, so it is never waiting for a credit message
//     that will not come.
//
// Each connection has one goroutine (the pump) that waits on its CQ,
// handles completions in order, re-posts receive requests, wakes readers
// and writers and sends CREDIT messages. Read copies out of the ring (after
// MR.Sync, which orders the workers' writes with ours); Write copies into
// staging and posts; both block with deadlines.
// The pump sleeps in CQ.Wait, which receives in the pump's goroutine
// (see package roce). With Config.ReadSpin, a Read that finds the ring
// empty first polls the CQ itself and runs the device's receive path in
// its own goroutine (roce.CQ.Progress), so a message needs no goroutine
// hop; the pump keeps off the CQ meanwhile, and completions are handled in
// order under one poll lock whoever polls.
//
// # Closing
//
// CloseWrite waits until everything written was posted, then sends FIN;
// the peer's Read returns io.EOF after the ring is drained. Close is
// CloseWrite, then a wait (at most Config.Linger, 5 s) until every message
// posted is acknowledged (RC ACKs mean it sits in the peer's memory); the
// QP and its resources go once the peer's FIN came, or a second later in
// the background (as TCP's FIN_WAIT: when both ends close at once, each
// still acknowledges the other's FIN instead of letting it retry into a
// reset). A peer that vanishes is seen as a send
// completion error after the RC retries (Timeout 14, RetryCnt 6: about half
// a second): reads and writes then fail with an error wrapping ErrReset.
// After a local Close, calls
// fail with errors wrapping net.ErrClosed; after a deadline, with errors
// wrapping os.ErrDeadlineExceeded (and Timeout() true), as net does.
//
// # The direct path (Config.DirectThreshold)
//
// Off by default (Config.DirectThreshold says why). With
// it, a reader that waits with a large buffer may have it filled in
// place:
//
//   - Receive requests get a 32-byte slot each in a control region, so
//     that SEND WITH IMMEDIATE messages can carry a payload; DATA, CREDIT
//     and FIN stay RDMA WRITE WITH IMMEDIATE, whose payload ignores the
//     slot.
//   - ADVERT (kind 3, a SEND): a Read with len(p) >= Config.DirectThreshold
//     that finds the ring empty, with no FIN and no advert outstanding,
//     registers p and sends {addr, rkey, len, head} (24 bytes, big-endian)
//     in a SEND WITH IMMEDIATE, head being the ring position the reader
//     has consumed.
//   - The writer's pump answers every ADVERT. If the writer has sent ring
//     bytes beyond head (they were in flight when the advert was made), it
//     sends DECLINE (kind 5) at once: RC order puts DECLINE behind those
//     bytes, so the reader finds them in the ring when it sees DECLINE.
//     Otherwise it keeps the advert, and its next Write (or the rest of the
//     current one) goes first into the advertised buffer with one RDMA
//     WRITE WITH IMMEDIATE of kind DIRECT (4) and ByteLen n <= len, from
//     the writer's own buffer registered the same way (zero copies at both
//     ends; the Write waits for that WRITE's completion as it uses the
//     caller's memory in place); the advert is then used up and later
//     bytes go to the ring.
//   - The reader, with an advert outstanding, returns only after DIRECT
//     (n bytes are in p) or DECLINE (then it copies from the ring). It never
//     returns while the writer may still write into p: a Read deadline or a
//     Close sends WITHDRAW (kind 6), which the writer's pump answers with
//     DECLINE unless its DIRECT was posted first; Close may instead destroy
//     the QP, after which nothing can arrive.
//   - Exactly-once and order: the writer uses an advert only when no ring
//     bytes are unaccounted for (sent == head of the advert), and after it
//     the ring resumes at the same position, so the byte sequence is the
//     ring bytes up to head, the DIRECT bytes, then the ring again. A
//     Write that was copying into staging when its pump took the advert
//     posts those ring bytes, then declines the advert (they come first).
//     Both sides writing at once is unaffected: adverts, declines and
//     withdrawals are messages under the same credit rules (an ADVERT
//     needs two credits like DATA; DECLINE may use the last one, like
//     CREDIT, as it always returns the advert's receive request).
//
// Switching, as in EXS: small or early writes go to the ring (lowest
// latency, the Write returns at once); bulk goes direct.
//
//   - A Write with less than 32 KiB left declines an advert it holds with
//     DECLINE-SMALL (kind 7) and uses the ring. A reader whose advert came
//     back so skips advertising for its next 1, 2, 4 … 64 Reads that could
//     (reset by a DIRECT), so that a ping-pong with large Read buffers
//     does not pay an ADVERT and a DECLINE per message.
//   - Hold: a Write with at least 256 KiB left, when the peer has
//     advertised since the last hold that failed, or (a probe) when the
//     ring is nearly full (the reader is behind and a direct write would
//     spare it a copy) and the peer has advertised before on this
//     connection, stops filling the ring and waits for an advert:
//     the bytes in flight drain, the reader finds the ring empty and, if
//     its Read is large, advertises with head == sent. The hold gives up
//     once every ring byte is acknowledged and the reader is within a
//     quarter ring of the end (it returns no credits after that) and a
//     grace has passed: twice the reader's recent time from a DIRECT to
//     its next ADVERT (its work between Reads), 0.5 to 10 ms; or after
//     50 ms. After a failed hold the writer does not hold again until the
//     next advert, and probes only after 1, 2, 4 … 1024 more Writes.
//     Steady bulk transfer with large Reads is then DIRECT after DIRECT:
//     the reader re-advertises as soon as a Read returns, and the writer's
//     next Write finds the advert there or holds for it.
//   - Registration cache: each side keeps the last 4 buffers it
//     registered for the direct path (by first byte and length) until the
//     connection is released, so a loop over one Read or Write buffer
//     registers it once (RegMR pins the pages; Dereg waits for the
//     workers). A cached Read buffer stays open to the peer's RDMA WRITE
//     (its rkey) while the connection lives: a peer that breaks the
//     protocol could write into it between Reads, as it could into the
//     ring; with DirectThreshold 0 no caller memory is ever exposed.
//
// Stats counts the bytes sent each way (DirectBytes, IndirectBytes), the
// adverts, declines, holds and registration-cache hits.
package stream
