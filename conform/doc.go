// Package conform probes a peer's RoCE v2 transport rule by rule, in the
// spirit of gVisor's packetimpact: a puppet QP on xroce's side sends
// exactly the packets a rule of the InfiniBand Architecture Specification
// (Volume 1, release 1.4, chapter 9, and annex A17 for RoCE v2) is about,
// and the answers are judged against what the rule requires.
//
// A Check is data: a stable name, the rule it tests, what it sends and
// what it requires, and a list of Steps, each packets to send (described
// relative to the QP under test: PSN offsets, sizes in path MTUs, the
// region it offers, the faults to inject) and a judge of the answers
// that came back while the step waited. The verdict is PASS, FAIL, KNOWN
// (a failure that is a documented deviation of a named implementation)
// or SKIP (the QP under test cannot host the check: no region, no
// receives posted, every right granted ...).
//
// A Trial runs one check against one QP as a pure state machine, in the
// style of package qp: Poll(now) returns the frames to send and the next
// deadline, Input(frame, now) takes what the peer answered; it never
// reads a clock or touches a socket. Run binds a Trial to a Wire (send
// frames, receive frames with their arrival time, now): internal/rogue's
// Puppet over a real link for xroce conform, a simulated responder on a
// fake clock in the tests.
//
// Requester checks turn the roles round: the peer's tool is the client
// and its QPs the requesters. A Server answers them with package qp's
// responder, which follows the rules, and a ServeTrial sits between the
// two on the QP under test: each Phase of the check withholds, replaces
// or adds answers (an Act) and its judge looks at what the requester did
// (its requests, new and sent again, with their times).
package conform
