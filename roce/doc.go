// Package roce is xroce's verbs API: RoCE v2 (RDMA over Converged Ethernet
// version 2, IBTA Vol. 1 Release 1.4 Annex A17) devices, protection
// domains, memory regions, completion queues, queue pairs and shared
// receive queues in user space, over any link.Link, after the verbs of
// IBTA Vol. 1 chapter 11 and libibverbs. The transport itself is package
// qp's engine.
//
// # Devices and workers
//
// NewDevice makes a device over a set of links: the queues of a network
// interface, which package nic opens (AF_XDP sockets, one per NIC queue,
// fed by package bpf's XDP program, or one AF_PACKET socket), or an
// in-memory link.NewPipe in tests; Info says which kind of link and mode
// it got.
//
// Each link has a worker: a qp.Engine and a goroutine. QPs are
// sharded to workers by QP number (QPN modulo the number of workers; QPs on
// an SRQ share its worker); a frame that arrives on another queue than its
// QP's is copied to the right worker (woken once per batch of them). A QP's
// frames leave on its worker's queue; on veth each frame arrives on the
// peer's queue of the same number (AF_XDP transmits with the socket's queue
// as the skb's queue mapping, and veth receives on that queue), so two xroce
// devices with as many queues see no forwarding when the QPNs of each
// connection are equal modulo the queues (as xroce perf allocates them),
// and every frame forwarded when they are not. On a real NIC RSS picks the
// queue from a hash of the addresses and ports, the UDP source port among
// them.
//
// The worker goroutine sleeps on its link (in ppoll on the socket when
// the link has a descriptor) until frames arrive, the
// engine's next deadline (ACK timeouts, RNR waits) or a kick, then takes
// a batch, gives it to the engine and transmits what the engine has
// ready. Calls from other goroutines (posting, modifying) take the
// worker's lock, which is held for each batch and not per packet; a post
// runs the engine and transmits itself when it may, and wakes the worker
// only when it has to. Config.BusyPoll makes the workers spin instead.
//
// Over a link.Pipe a device's goroutines sleep only on channels and
// timers, and it reads the time with time.Now, so it runs inside a
// testing/synctest bubble on fake time: the package's timing tests over
// the pipe, and package stream's, run so.
//
// # Receiving in the waiting goroutine
//
// Whoever holds the worker's lock may take frames off the link (without
// waiting) and run the transport, so frames reach it in order whoever
// takes them; one goroutine at a time, the watcher, sleeps on the link
// and does that work when the kernel wakes it (recv.go has the state
// table). A goroutine in CQ.Wait becomes the watcher of its QPs' link: it
// sleeps on the AF_XDP (or AF_PACKET) socket itself and, woken by the
// kernel, receives, runs the transport and returns with the completion,
// instead of the worker goroutine's wake-up and then its own. The worker
// goroutine takes the link back when the waiter returns, by a change of
// state alone.
//
// A goroutine that busy-polls calls CQ.Poll, which only reads
// completions, and when the CQ is empty CQ.Progress (or Device.Progress),
// which receives a batch on the link in the calling goroutine: as
// ibv_rc_pingpong and perftest wait by default, without any goroutine's
// wake-up on the way of a message. Progress is also the way to wait for
// what completes nothing locally, such as an RDMA WRITE landing in a
// buffer. A waiter or poller holds back the ACKs of what it received
// until its next call (or its next post, which sends them along with its
// own frames in one transmit), 10 ms at most, as a delayed ACK.
//
// # Resources
//
// Memory regions are Go byte slices pinned with mlock for their lifetime
// (pages shared by several regions are counted). A key is the region's
// slot in the low bits and, above them, a keyed pseudorandom permutation of
// the slot's registration count (keys.go): unpredictable, and not given
// again until the slot has been registered 2^(32-slot bits) times.
// Registering a buffer that is registered already with the same rights
// returns the same region (the registration cache, see BenchmarkRegMR).
// Dereg revokes: the key stops working at once, Dereg waits for the
// workers' current batches, and from then on nothing reads or writes the
// region; whatever still needed it (a peer's WRITE half received, READ
// responses not yet sent, a posted request) fails as an invalid key does,
// because package qp resolves memory for every packet and keeps none.
// Keys are looked up by the workers without locks.
//
// CQs are rings filled by the transport: Poll copies completions into the
// caller's slice without allocating, Wait blocks with a context, Arm
// arms a one-shot notification channel (ibv_req_notify_cq). A full CQ counts the lost completions and raises
// EventCQError on Events; it never drops them silently.
//
// # Addresses and connections
//
// The GID table is built as rxe builds it: index 0 is the link-local
// fe80::/64 address made from the MAC, then the interface's addresses,
// IPv4 ones as ::ffff:a.b.c.d. Resolve finds a peer's MAC in
// Config.Neighbors or asks Config.Resolver (package nic's asks the
// kernel: route, then neighbour, triggering ARP or NDP when the entry is
// missing). QP.Connect brings a QP to RTS towards an Endpoint, and
// ConnectTCP swaps Endpoints over TCP with the exchange of ibv_rc_pingpong
// (PingpongCodec) or with an rkey and address too (XroceCodec).
package roce
