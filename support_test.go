package rbloom

import (
	"errors"
	"strings"
	"testing"

	"github.com/rbloom/rbloom/rbloomtest"
	"github.com/redis/go-redis/v9"
)

// TestServerWithoutLua: a server where rbloom's commands are missing
// (scripting or BITFIELD_RO disabled with rename-command, as managed
// offerings and Valkey without its Lua engine can be) makes Create and
// every Open fail at once, naming what is missing, rather than letting a
// later call fail with "unknown command".
func TestServerWithoutLua(t *testing.T) {
	for _, tc := range []struct {
		name    string
		renamed []string
		want    string
	}{
		{"no EVAL", []string{"EVAL"}, "EVAL"},
		{"no EVALSHA", []string{"EVALSHA"}, "EVALSHA"},
		{"no BITFIELD_RO", []string{"BITFIELD_RO"}, "BITFIELD_RO"},
		{"no scripting", []string{"EVAL", "EVALSHA", "FCALL"}, "Lua"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t)})
			t.Cleanup(func() { admin.Close() })
			// The filter exists, made while the commands were there.
			must(0, must(NewCounting(admin, "made", Options{Capacity: 1000})).on(t).Create(ctx)).on(t)
			var args []string
			for _, cmd := range tc.renamed {
				args = append(args, "--rename-command", cmd, "")
			}
			srv := rbloomtest.StartServer(t, args...)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { rdb.Close() })
			if err := rdb.Set(ctx, "rbloom:{made}", must(admin.Get(ctx, "rbloom:{made}").Result()).on(t), 0).Err(); err != nil {
				t.Fatal(err)
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v, want ErrUnsupported naming %s", what, err, tc.want)
				}
			}
			c := must(NewCounting(rdb, "new", Options{Capacity: 1000})).on(t)
			check("Create", c.Create(ctx))
			_, err := Open(ctx, rdb, "made", Options{})
			check("Open", err)
			_, err = OpenCounting(ctx, rdb, "made", Options{})
			check("OpenCounting", err)
			_, err = OpenClassic(ctx, rdb, "made", Options{})
			check("OpenClassic", err)
			_, err = OpenCuckoo(ctx, rdb, "made", Options{})
			check("OpenCuckoo", err)
			if n := must(rdb.DBSize(ctx).Result()).on(t); n != 1 {
				t.Errorf("%d keys after the refused calls, want 1 (the filter copied in)", n)
			}
		})
	}
}

// TestOpenWrongPassword: go-redis reports a connection it could not set up
// (a wrong password) only from the pipeline's Exec, with no error on its
// commands; Open, whose pipeline carries the server check, reports it
// rather than taking the empty replies for a missing filter.
func TestOpenWrongPassword(t *testing.T) {
	srv := rbloomtest.StartServer(t, "--requirepass", "secret")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong"})
	t.Cleanup(func() { rdb.Close() })
	if _, err := Open(ctx, rdb, "users", Options{}); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("Open with a wrong password: %v, want the server's WRONGPASS", err)
	}
	c := must(NewCounting(rdb, "users", Options{Capacity: 1000})).on(t)
	if err := c.Create(ctx); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("Create with a wrong password: %v, want the server's WRONGPASS", err)
	}
}
