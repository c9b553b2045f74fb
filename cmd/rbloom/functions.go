package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rbloom/rbloom"
	"github.com/spf13/pflag"
)

// setupFunctions is 'functions install' and 'functions status': the
// admin's side of rbloom.Options.UseFunctions. install loads this version's
// function library (rbloom.InstallFunctions) on the server, or on every
// master with --cluster, and prints one line per server; status prints,
// per server, ADDR, "loaded" or "missing", this version's library and the
// other rbloom libraries there ("-" for none), tab-separated, and exits 1
// when the library is missing somewhere.
func setupFunctions(c *cli, _ *pflag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		action := args[0]
		if action != "install" && action != "status" {
			return fmt.Errorf("want install or status (run 'rbloom help functions')")
		}
		if c.stopServer != nil {
			return errors.New("needs a Redis 7 server: give -u or set REDIS_URL")
		}
		if action == "install" {
			if err := rbloom.InstallFunctions(ctx, c.rdb); err != nil {
				return err
			}
		}
		status, err := rbloom.FunctionsStatus(ctx, c.rdb)
		if err != nil {
			return err
		}
		missing := false
		for _, s := range status {
			if action == "install" {
				if !s.Loaded { // a master that joined meanwhile
					return fmt.Errorf("%s: %s is not loaded after the install", s.Addr, rbloom.FunctionLibrary())
				}
				fmt.Fprintf(c.out, "installed %s on %s\n", rbloom.FunctionLibrary(), s.Addr)
				continue
			}
			state := "loaded"
			if !s.Loaded {
				state, missing = "missing", true
			}
			var others []string
			for _, l := range s.Libraries {
				if l != rbloom.FunctionLibrary() {
					others = append(others, l)
				}
			}
			if len(others) == 0 {
				others = []string{"-"}
			}
			fmt.Fprintf(c.out, "%s\t%s\t%s\t%s\n", s.Addr, state, rbloom.FunctionLibrary(), strings.Join(others, ","))
		}
		if missing {
			return errAbsent
		}
		return nil
	}
}
