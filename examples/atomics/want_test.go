package main

var wantOutput = []string{"FETCH_ADD 1: was 102", "CMP_SWAP 103→1000: was 103", "was 1000 (no swap)", "server: counter is 1000"}
