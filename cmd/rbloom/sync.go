package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
)

// runSync is 'rbloom sync ...': it runs the rbloom-sync command, which
// keeps a counting filter equal to a PostgreSQL table (package pgsync, a
// module of its own), with the same arguments, standard streams and exit
// status. It lives in its own binary so that rbloom links no database
// driver: its first 'go run ./cmd/rbloom demo' compiles none.
func (c *cli) runSync(ctx context.Context, args []string) error {
	path, err := exec.LookPath("rbloom-sync")
	if err != nil {
		return errors.New("sync needs the rbloom-sync command on PATH: from a clone of rbloom, go install ./pgsync/cmd/rbloom-sync (or go run ./pgsync/cmd/rbloom-sync ...)")
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.out, c.stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exitStatus(exit.ExitCode())
		}
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}
