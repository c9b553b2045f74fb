package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Items read from stdin or a file are handed on in batches bounded in items
// and bytes, so that a file of any length is sent with bounded memory. The
// library cuts its own round trips (about 9,000 items each); a batch is a
// bit more than one of those.
const (
	batchItems = 10_000
	batchBytes = 4 << 20
	// maxLine is the longest line accepted, in bytes, not counting its
	// end ("\n" or "\r\n"): 1 MiB. A longer line is an error that names
	// it; the lines before it have been handed on.
	maxLine = 1 << 20
)

// errLongLine is the error for line n, longer than maxLine.
func errLongLine(n int) error {
	return fmt.Errorf("line %d is longer than %d bytes (1 MiB), the most an item read from a file or stdin may hold", n, maxLine)
}

// readBatches reads items from r, one a line, and calls fn with batches of
// them and the number of bytes read so far. A final "\r" is dropped with
// the "\n" (files written on Windows), and empty lines are skipped. A line
// longer than maxLine, not counting its end, stops it with errLongLine
// after the batch of the lines before it.
//
// A batch is also handed on whenever no complete line is left in the read
// buffer, before reading more: the next read may block, on a terminal or a
// slow pipe, and the items read so far should be answered first. fn must
// not keep the batch: its slice is reused.
func readBatches(r io.Reader, fn func(items []string, read int64) error) error {
	// The buffer holds the longest line with its "\r\n": ReadSlice then
	// returns any line that is not too long whole.
	br := bufio.NewReaderSize(r, maxLine+2)
	var (
		batch []string
		size  int
		read  int64
		line  int
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := fn(batch, read)
		batch, size = batch[:0], 0
		return err
	}
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if ferr := flush(); ferr != nil {
				return ferr
			}
			return errLongLine(line + 1)
		}
		if len(b) > 0 {
			line++
			read += int64(len(b))
			b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
			if len(b) > maxLine {
				if ferr := flush(); ferr != nil {
					return ferr
				}
				return errLongLine(line)
			}
			if len(b) > 0 {
				batch = append(batch, string(b))
				size += len(b)
			}
		}
		if err == io.EOF {
			return flush()
		}
		if err != nil {
			if ferr := flush(); ferr != nil {
				return ferr
			}
			return fmt.Errorf("read line %d: %w", line+1, err)
		}
		if len(batch) >= batchItems || size >= batchBytes || !lineBuffered(br) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
}

// lineBuffered reports whether br holds a complete line, which it can
// return without reading.
func lineBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}
