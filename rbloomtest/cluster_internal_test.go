package rbloomtest

import "testing"

func TestOwnsSlot(t *testing.T) {
	// A CLUSTER NODES reply from the myself node, in the middle of moving
	// slot 100 away and slot 9000 in.
	const nodes = `07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-99 100 101-5460 [100->-e7d1] [9000-<-292f]
e7d1 127.0.0.1:30002@40002 master - 0 1700000000000 2 connected 5461-10922
292f 127.0.0.1:30003@40003 master - 0 1700000000000 3 connected 10923-16383
`
	tests := []struct {
		slot int
		want bool
	}{
		{0, true}, {99, true}, {100, true}, {5460, true},
		{5461, false}, {9000, false}, {16383, false},
	}
	for _, tc := range tests {
		if got := ownsSlot(nodes, tc.slot); got != tc.want {
			t.Errorf("ownsSlot(%d) = %v, want %v", tc.slot, got, tc.want)
		}
	}
	if ownsSlot("07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected\n", 0) {
		t.Error("ownsSlot on a master with no slots = true")
	}
}
