package rbloom

import "testing"

// TestDecodeWindowReply pins the replies of window.lua as the client
// decodes them, and refuses every other.
func TestDecodeWindowReply(t *testing.T) {
	for _, c := range []struct {
		reply string
		n     int
		want  windowReply
		bad   bool
	}{
		{reply: "", n: 0, want: windowReply{}},
		{reply: "010", n: 3, want: windowReply{answers: "010"}},
		{reply: "?", n: 2, want: windowReply{kind: windowMissing}},
		{reply: "~", n: 2, want: windowReply{kind: windowWait}},
		{reply: "^123", n: 2, want: windowReply{kind: windowReread, bucket: 123}},
		{reply: "!124:10", n: 2, want: windowReply{kind: windowMoved, bucket: 124, answers: "10"}},
		{reply: "01", n: 3, bad: true},
		{reply: "", n: 1, bad: true},
		{reply: "0x1", n: 3, bad: true},
		{reply: "?x", n: 2, bad: true},
		{reply: "^", n: 2, bad: true},
		{reply: "^12a", n: 2, bad: true},
		{reply: "!124", n: 2, bad: true},
		{reply: "!x:10", n: 2, bad: true},
		{reply: "!124:1", n: 2, bad: true},
	} {
		got, err := decodeWindowReply(c.reply, c.n)
		switch {
		case c.bad && err == nil:
			t.Errorf("decodeWindowReply(%q, %d) = %+v, want an error", c.reply, c.n, got)
		case !c.bad && (err != nil || got != c.want):
			t.Errorf("decodeWindowReply(%q, %d) = %+v, %v, want %+v", c.reply, c.n, got, err, c.want)
		}
	}
}

// TestWindowMissingIsFilters: window.lua answers a missing ring with the
// filters' REPLY_MISSING, which luaConstants writes from replyMissing.
func TestWindowMissingIsFilters(t *testing.T) {
	if string(rune(windowMissing)) != replyMissing {
		t.Fatalf("windowMissing %q, replyMissing %q", windowMissing, replyMissing)
	}
}
