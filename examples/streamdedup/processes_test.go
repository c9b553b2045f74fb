package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// buildExample builds this example into the test's temp dir, with -race
// when the tests have it, and returns the binary's path.
func buildExample(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH, and the test builds the example with it: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "streamdedup")
	args := []string{"build", "-o", bin}
	if raceDetector {
		args = append(args, "-race")
	}
	if out, err := exec.Command(gobin, append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is one process of the example; its output is readable once done
// is closed.
type proc struct {
	name    string
	crashAt string // its -crash-at, if any
	cmd     *exec.Cmd
	out     bytes.Buffer
	done    chan struct{}
	err     error // of Wait
	killed  bool  // by the test
}

// start runs bin with args, and closes p.done, then sends p on exited (if
// not nil), when it exits. It is killed when the test ends.
func start(t *testing.T, name, bin string, args []string, exited chan<- *proc) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
		if exited != nil {
			exited <- p
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// kill sends SIGKILL: the process dies wherever it is, as in a crash.
func (p *proc) kill() {
	p.killed = true
	_ = p.cmd.Process.Kill()
}

// stop asks the process to finish (SIGTERM), and kills it after timeout.
func (p *proc) stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM", p.name, timeout)
	}
}

// diedOfSIGKILL reports whether the process, done, was killed by SIGKILL.
func (p *proc) diedOfSIGKILL() bool {
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
