package main

var wantOutput = []string{`server: 24 bytes written, immediate 0x1234: "hello from an RDMA WRITE"`, "client: wrote 24 bytes"}
