package bench

import (
	"strings"
	"testing"
)

func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 9585059: "9,585,059", -1234: "-1,234"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestTimes(t *testing.T) {
	for x, want := range map[float64]string{0.004512: "0.00451x", 0.452: "0.452x", 1: "1x", 105.3: "105x", 1234.5: "1,235x"} {
		if got := times(x); got != want {
			t.Errorf("times(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestTable(t *testing.T) {
	tb := newTable("#", "row", "items/s", "ratio")
	tb.add("1", "seed", "2,300", "0.0100x")
	tb.add("8a", "Counting.AddMany", "150,000", "")
	var b strings.Builder
	tb.write(&b)
	want := `| #  | row              | items/s |   ratio |
| -- | ---------------- | ------: | ------: |
| 1  | seed             |   2,300 | 0.0100x |
| 8a | Counting.AddMany | 150,000 |         |
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
