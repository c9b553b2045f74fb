package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadBatches(t *testing.T) {
	t.Parallel()
	var in strings.Builder
	var want []string
	for i := range 2*batchItems + 123 {
		item := fmt.Sprint("item:", i)
		want = append(want, item)
		in.WriteString(item + "\n")
		if i%1000 == 0 {
			in.WriteString("\n") // skipped
		}
	}
	in.WriteString("last\r\n\r\nno newline")
	want = append(want, "last", "no newline")

	var got []string
	var lastRead int64
	err := readBatches(strings.NewReader(in.String()), func(items []string, read int64) error {
		if len(items) == 0 || len(items) > batchItems {
			t.Errorf("batch of %d items, want 1 to %d", len(items), batchItems)
		}
		if read <= lastRead {
			t.Errorf("read = %d after %d, want it to grow", read, lastRead)
		}
		lastRead = read
		got = append(got, items...)
		return nil
	})
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("readBatches: %v; got %d items, want %d", err, len(got), len(want))
	}
	if lastRead != int64(in.Len()) {
		t.Errorf("read = %d at the end, want %d", lastRead, in.Len())
	}

	// Batches are bounded in bytes too.
	big := strings.Repeat(strings.Repeat("x", 100_000)+"\n", 100)
	err = readBatches(strings.NewReader(big), func(items []string, _ int64) error {
		if n := len(items) * 100_000; n > batchBytes+100_000 {
			t.Errorf("batch of %d bytes, want at most about %d", n, batchBytes)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// fn's error stops the reading.
	calls := 0
	err = readBatches(strings.NewReader(in.String()), func([]string, int64) error {
		calls++
		return io.ErrClosedPipe
	})
	if err != io.ErrClosedPipe || calls != 1 {
		t.Errorf("readBatches with a failing fn: %v after %d calls, want %v after 1", err, calls, io.ErrClosedPipe)
	}
}

// TestReadBatchesAnswersAtOnce checks that lines that trickle in, as typed
// at a terminal, are handed on before more input comes.
func TestReadBatchesAnswersAtOnce(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	batches := make(chan []string)
	done := make(chan error)
	go func() {
		done <- readBatches(r, func(items []string, _ int64) error {
			batches <- slices.Clone(items)
			return nil
		})
	}()
	for _, lines := range [][]string{{"a"}, {"b", "c"}, {"d"}} {
		io.WriteString(w, strings.Join(lines, "\n")+"\n")
		select {
		case got := <-batches:
			if !slices.Equal(got, lines) {
				t.Errorf("batch %q, want %q", got, lines)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no batch for %q while the writer waits", lines)
		}
	}
	w.Close()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestReadBatchesLineLimit checks that a line of exactly maxLine bytes is
// an item whatever its end, and that a longer one is an error that names
// it, after the lines before it were handed on.
func TestReadBatchesLineLimit(t *testing.T) {
	t.Parallel()
	full := strings.Repeat("x", maxLine)
	read := func(in string) ([]string, error) {
		var got []string
		err := readBatches(strings.NewReader(in), func(items []string, _ int64) error {
			for _, item := range items {
				got = append(got, item[:min(len(item), 3)]+fmt.Sprint("/", len(item)))
			}
			return nil
		})
		return got, err
	}
	for _, c := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"LF", "a\n" + full + "\nb\n", []string{"a/1", "xxx/1048576", "b/1"}, ""},
		{"CRLF", "a\r\n" + full + "\r\nb\r\n", []string{"a/1", "xxx/1048576", "b/1"}, ""},
		{"at EOF", "a\n" + full, []string{"a/1", "xxx/1048576"}, ""},
		{"CR at EOF", "a\n" + full + "\r", []string{"a/1", "xxx/1048576"}, ""},
		{"one more, LF", "a\nb\n\n" + full + "y\nc\n", []string{"a/1", "b/1"}, "line 4 is longer than 1048576 bytes (1 MiB)"},
		{"one more, CRLF", "a\r\n" + full + "y\r\nc\n", []string{"a/1"}, "line 2 is longer than 1048576 bytes"},
		{"one more at EOF", "a\n" + full + "y", []string{"a/1"}, "line 2 is longer than 1048576 bytes"},
		{"far more", full + full + "\n", nil, "line 1 is longer than 1048576 bytes"},
	} {
		got, err := read(c.in)
		if !slices.Equal(got, c.want) || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: readBatches gave %q, %v; want %q, %q", c.name, got, err, c.want, c.err)
		}
	}
}
