// Package device opens a RoCE device as every xroce tool does and holds
// what the tools built on one share: the interface picked when -d names
// none (DefaultInterface, RouteInterface), the fallback line when AF_XDP
// cannot be used (OpenNIC and the other Open functions), the endpoint a QP
// is described by to its peer (LocalEndpoint, MTUFromBytes), the TCP
// exchange's connection (Dial), busy-polling a completion queue (PollCQ,
// SpinYield) and how long a side keeps answering once its run is over
// (AnswerLinger). pingpong, perf, conform and the rdma_cm clones use it;
// it imports no tool package. It is Linux's, as the devices are; elsewhere
// the package is empty.
package device
