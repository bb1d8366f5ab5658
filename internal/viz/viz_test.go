package viz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// evil is capture text that must come out as text, never as markup.
const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>"'&`

// testCapture is two pairs: an RC pair with one of each mark, and a UD pair
// with n plain packets.
func testCapture(n int) *Capture {
	c := &Capture{
		Title: "t " + evil, Source: "xroce dump " + evil, Frames: 12 + n,
		Pairs: []Pair{
			{A: Endpoint{Name: "A", Addr: "198.18.0.1", QP: 0x11, QPKnown: true}, B: Endpoint{Addr: evil, QP: 0x22, QPKnown: true}, Transport: "RC"},
			{A: Endpoint{Addr: "198.18.0.1"}, B: Endpoint{Addr: "198.18.0.2", QP: 0x33, QPKnown: true}, Transport: "UD"},
		},
	}
	hdr := []Header{
		{Name: "Ethernet", Title: evil},
		{Name: "BTH", Title: "opcode " + evil, About: "base transport header", Fields: []Field{
			{"OpCode", 8, "0x04"}, {"S", 1, "0"}, {"M", 1, "0"}, {"Pad", 2, "0"}, {"TVer", 4, "0"}, {"P_Key", 16, "0xffff"},
			{"F", 1, "0"}, {"B", 1, "0"}, {"Resv6", 6, "0"}, {"DestQP", 24, "0x000022"},
			{"A", 1, "1"}, {"Resv7", 7, "0"}, {"PSN", 24, evil}}},
		{Name: "RETH", Fields: []Field{{"VA", 64, "0x1"}, {"R_Key", 32, "0x2"}, {"DMA Length", 32, "3"}}},
		{Name: "ICRC", Fields: []Field{{"ICRC", 32, "0x01020304"}}},
	}
	add := func(pair int, fromA, resp bool, m Mark, note string) *Packet {
		c.Packets = append(c.Packets, Packet{
			N: len(c.Packets) + 1, Time: time.Duration(len(c.Packets)) * time.Millisecond, Pair: pair, FromA: fromA,
			Src: "198.18.0.1", Dst: "198.18.0.2", Opcode: "RC SEND_ONLY", PSN: uint32(100 + len(c.Packets)),
			Response: resp, Data: !resp, Acked: resp && m == 0, Payload: 64, Wire: 128,
			Label: "RC SEND_ONLY " + evil, Marks: m, Note: note, Headers: hdr,
		})
		return &c.Packets[len(c.Packets)-1]
	}
	add(0, true, false, 0, "")
	add(0, false, true, 0, "")
	add(0, true, false, MarkLost, "lost "+evil)
	add(0, false, true, MarkNAK, "NAK")
	add(0, true, false, MarkRetrans, "again")
	add(0, false, true, MarkRNR, "RNR").RNRWait = 1280 * time.Microsecond
	add(0, true, false, MarkRetrans, "again")
	add(0, false, true, MarkNAKError, "remote access error")
	add(0, true, false, MarkGap, "2 PSNs missing").Missing = 2
	add(0, true, false, MarkCM|MarkBad, "bad ICRC")
	c.Packets = append(c.Packets, Packet{N: 11, Pair: -1, Marks: MarkBad, Error: "malformed: " + evil, Label: evil})
	add(0, false, true, 0, "")
	for range n {
		add(1, true, false, 0, "")
	}
	return c
}

func TestVizClass(t *testing.T) {
	for _, tc := range []struct {
		p    Packet
		want string
	}{
		{Packet{}, "req"},
		{Packet{Response: true}, "resp"},
		{Packet{Marks: MarkRetrans | MarkLost}, "lost"},
		{Packet{Marks: MarkCM | MarkBad}, "bad"},
		{Packet{Marks: MarkNAK | MarkRNR}, "nak"},
		{Packet{Marks: MarkGap | MarkRetrans}, "gap"},
	} {
		if got := tc.p.Class(); got != tc.want {
			t.Errorf("Class(%b) = %q, want %q", tc.p.Marks, got, tc.want)
		}
	}
}

// page renders c and parses it back.
func page(t *testing.T, c *Capture) (string, *html.Node) {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, c); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("page does not parse: %v", err)
	}
	return b.String(), doc
}

// count counts elements of tag with all of classes.
func count(n *html.Node, tag string, classes ...string) int {
	c := 0
	if n.Type == html.ElementNode && n.Data == tag && hasClasses(n, classes) {
		c++
	}
	for k := n.FirstChild; k != nil; k = k.NextSibling {
		c += count(k, tag, classes...)
	}
	return c
}

func hasClasses(n *html.Node, classes []string) bool {
	have := strings.Fields(attr(n, "class"))
	for _, want := range classes {
		found := false
		for _, h := range have {
			found = found || h == want
		}
		if !found {
			return false
		}
	}
	return true
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// checkSelfContained fails if the page could fetch anything: an element
// with a URL attribute that is not a fragment, a script with src, a link or
// a CSS url() or @import.
func checkSelfContained(t *testing.T, doc *html.Node, s string) {
	t.Helper()
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "link", "iframe", "img", "object", "embed", "base", "image", "use":
				t.Errorf("page has a <%s> element", n.Data)
			}
			for _, a := range n.Attr {
				switch a.Key {
				case "src", "href", "action", "srcset", "xlink:href", "poster", "data":
					if !strings.HasPrefix(a.Val, "#") {
						t.Errorf("<%s %s=%q>: a URL that is not a fragment", n.Data, a.Key, a.Val)
					}
				}
			}
		}
		for k := n.FirstChild; k != nil; k = k.NextSibling {
			walk(k)
		}
	}
	walk(doc)
	for _, bad := range []string{"http:", "https:", "url(", "@import", "//cdn", "fetch(", "XMLHttpRequest"} {
		if strings.Contains(s, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	if !strings.Contains(s, `http-equiv="Content-Security-Policy" content="default-src 'none'`) {
		t.Errorf("page lacks its Content-Security-Policy (no fetches)")
	}
}

func TestVizHTML(t *testing.T) {
	c := testCapture(3)
	s, doc := page(t, c)
	checkSelfContained(t, doc, s)
	if strings.Contains(s, "<script>alert") || strings.Contains(s, "<img") {
		t.Errorf("capture text came out as markup")
	}
	if n := count(doc, "script"); n != 2 {
		t.Errorf("%d script elements, want 2 (data and code)", n)
	}
	// Every packet of a pair is an arrow; the malformed one has no pair.
	if n := count(doc, "g", "arrow"); n != len(c.Packets)-1 {
		t.Errorf("%d arrows, want %d", n, len(c.Packets)-1)
	}
	for _, tc := range []struct {
		class string
		want  int
	}{{"lost", 1}, {"nak", 1}, {"nakerr", 1}, {"rnr", 1}, {"retrans", 2}, {"gap", 1}, {"bad", 1}} {
		if n := count(doc, "g", "arrow", tc.class); n != tc.want {
			t.Errorf("%d %s arrows, want %d", n, tc.class, tc.want)
		}
	}
	if n := count(doc, "g", "gapmark"); n != 1 {
		t.Errorf("%d gap marks, want 1", n)
	}
	if n := count(doc, "g", "wait"); n != 1 {
		t.Errorf("%d RNR waits, want 1", n)
	}
	if !strings.Contains(s, "RNR wait 1.28 ms") {
		t.Errorf("no RNR wait label")
	}
	if n := count(doc, "svg", "seq"); n != 2 {
		t.Errorf("%d sequence diagrams, want 2", n)
	}
	// RC: A's requests (B sent no requests); UD: A's requests; a
	// throughput graph each.
	if n := count(doc, "svg", "graph"); n != 4 {
		t.Errorf("%d graphs, want 4", n)
	}
	if n := count(doc, "tr") - 1; n != len(c.Packets) {
		t.Errorf("%d list rows, want %d", n, len(c.Packets))
	}
	// The headers as JSON: layouts once, each packet's values.
	var data struct {
		Layouts [][]json.RawMessage
		Pkts    [][]json.RawMessage
	}
	js := s[strings.Index(s, `<script id="data" type="application/json">`)+len(`<script id="data" type="application/json">`):]
	js = js[:strings.Index(js, "</script>")]
	if err := json.Unmarshal([]byte(js), &data); err != nil {
		t.Fatalf("header data: %v", err)
	}
	if len(data.Layouts) != 4 || len(data.Pkts) != len(c.Packets) {
		t.Errorf("%d layouts and %d packets in the data, want 4 and %d", len(data.Layouts), len(data.Pkts), len(c.Packets))
	}
}

// A pair with more packets than MaxArrows draws MaxArrows and says so.
func TestVizWindow(t *testing.T) {
	c := testCapture(MaxArrows + 500)
	s, doc := page(t, c)
	if n := count(doc, "g", "arrow"); n != 11+MaxArrows {
		t.Errorf("%d arrows, want %d", n, 11+MaxArrows)
	}
	want := fmt.Sprintf("the diagram draws the first %d of %d packets", MaxArrows, MaxArrows+500)
	if !strings.Contains(s, want) {
		t.Errorf("page does not say %q", want)
	}
	c.Truncated = 7
	if s, _ := page(t, c); !strings.Contains(s, "7 more RoCE v2 packets") {
		t.Errorf("page does not say the capture was cut")
	}
}

// Odd models render without panicking: no packets, packets without pairs,
// pair indexes out of range, all at one instant, PSNs that wrap.
func TestVizOdd(t *testing.T) {
	for name, c := range map[string]*Capture{
		"empty":    {},
		"no pairs": {Packets: []Packet{{N: 1, Pair: 3}, {N: 2, Pair: -1}}},
		"instant": {Pairs: []Pair{{Transport: "RC"}}, Packets: []Packet{
			{N: 1, Data: true, FromA: true}, {N: 2, Data: true, FromA: true}, {N: 3, Response: true, Acked: true}}},
		"wrap": {Pairs: []Pair{{Transport: "RC"}}, Packets: []Packet{
			{N: 1, Data: true, FromA: true, PSN: 1<<24 - 1}, {N: 2, Data: true, FromA: true, PSN: 0, Time: 1},
			{N: 3, Response: true, Acked: true, PSN: 0, Time: 2}}},
		"headers": {Pairs: []Pair{{Transport: "CM"}}, Packets: []Packet{{N: 1, Headers: []Header{
			{Name: "X", Fields: []Field{{"odd", 33, ""}, {"zero", 0, "1"}, {"neg", -4, "2"}}}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			s, doc := page(t, c)
			checkSelfContained(t, doc, s)
		})
	}
}

func TestVizTicks(t *testing.T) {
	got := niceTicks(0, 10, 5)
	if len(got) != 6 || got[0] != 0 || got[5] != 10 {
		t.Errorf("niceTicks(0, 10, 5) = %v", got)
	}
	for _, tc := range [][2]float64{{5, 5}, {1, 0}, {0, 1e300}} {
		if got := niceTicks(tc[0], tc[1], 5); len(got) == 0 || len(got) > 20 {
			t.Errorf("niceTicks(%v, %v) = %v", tc[0], tc[1], got)
		}
	}
	var u psnUnwrap
	for i, tc := range []struct {
		psn  uint32
		want int64
	}{{1<<24 - 2, 0}, {1<<24 - 1, 1}, {0, 2}, {5, 7}, {3, 5}} {
		if got := u.at(tc.psn); got != tc.want {
			t.Errorf("step %d: at(%d) = %d, want %d", i, tc.psn, got, tc.want)
		}
	}
}
