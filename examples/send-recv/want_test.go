package main

var wantOutput = []string{`server: received "message 0"`, `server: received "message 2"`, `server: received "bye"`, "client: sent 4 messages"}
