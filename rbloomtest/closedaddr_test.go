//go:build unix

package rbloomtest

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestClosedAddrRefuses checks that the port stays refused even when another
// listener asks the kernel for a free port many times meanwhile.
func TestClosedAddrRefuses(t *testing.T) {
	addr := ClosedAddr(t)
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if l.Addr().String() == addr {
			t.Fatalf("a listener got %s, which ClosedAddr holds", addr)
		}
		l.Close()
	}
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if _, err := net.Listen("tcp", addr); err == nil {
		t.Fatalf("a listener could take %s", addr)
	}
}
