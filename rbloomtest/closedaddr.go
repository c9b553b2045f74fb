//go:build unix

package rbloomtest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// ClosedAddr returns a loopback address where a dial is refused for the
// whole test. Closing a listener would free its port for any server another
// parallel test starts, which then answers instead of refusing; ClosedAddr
// keeps the port bound to a socket that never listens, which the kernel
// answers with a reset, until the test ends.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("rbloomtest: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("rbloomtest: bind a port on 127.0.0.1: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("rbloomtest: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
