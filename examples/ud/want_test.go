package main

var wantOutput = []string{`: "datagram 0"`, `: "datagram 2"`, "client: sent 3 datagrams"}
