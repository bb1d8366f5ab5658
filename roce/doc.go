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
// Each link has one worker goroutine that owns it and a qp.Engine. QPs are
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
// The worker loop receives a batch with a timeout that ends at the
// engine's next deadline (ACK timeouts, RNR waits), gives it to the
// engine, transmits what the engine has ready, and sleeps again. Calls from other goroutines (posting, modifying) take the
// worker's lock, which it holds for each batch and not per packet, and wake
// it only when it sleeps. Config.BusyPoll makes the workers spin instead.
//
// # Polling receives: caller-driven progress
//
// A goroutine that busy-polls a CQ, as ibv_rc_pingpong and perftest wait
// by default, does the receive work itself: CQ.Poll that finds the CQ
// empty calls Device.Progress, which takes a batch from each idle worker's
// link without waiting, runs the transport on it and transmits the
// answers, so that a message reaches the poller without a worker
// goroutine's wakeup on the way. On a small machine, where a spinning
// poller and the workers compete for the cores, that wakeup is most of
// the latency (and spinning while the workers starve is worse than
// sleeping). Progress is also the way to wait for what completes nothing
// locally, such as an RDMA WRITE landing in a buffer.
//
// Only one goroutine receives from a link at a time, so frames reach the
// transport in order: a worker whose link is wanted by pollers hands it
// over after its current batch and parks; it still runs timers and the
// work of user calls, and takes the link back when a poller sleeps
// (CQ.Wait, CQ.Notify) or, at its next look (1 to 10 ms apart), when
// nobody has polled for a millisecond. A poller holds back the ACKs of
// what it received until its next call (or its next post, which sends
// them along with its own frames in one transmit).
// Config.NoPollProgress leaves CQ.Poll to look at the CQ only.
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
// CQs are rings filled by the workers: Poll copies completions into the
// caller's slice without allocating, Wait blocks with a context, Notify
// gives a channel. A full CQ counts the lost completions and raises
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
