package main

var wantOutput = []string{`client: read 1048576 bytes: "xroce reads this remotely. "`, "server: buffer read by the client"}
