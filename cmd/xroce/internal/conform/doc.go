// Package conform is xroce conform: it probes a device under test's RoCE
// v2 responder (--via TOOL HOST: as the client of an ordinary tool the
// device runs as a server, perftest's, rdma-core's pingpongs or rping -P
// over RDMA CM, conform_rping.go) or requester (--serve TOOL: as the
// server of the tool's client, conform_serve.go) rule by rule, with the
// checks of package github.com/xroce/xroce/conform, which this package
// imports under the same name. It compares the verdicts with a profile
// (conform_profile.go) and writes JSON, JUnit XML, a pcap and the lab's
// sequence diagrams. It runs on Linux only; elsewhere it says so
// (conform_other.go).
package conform
