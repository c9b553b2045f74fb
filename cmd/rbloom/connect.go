package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/internal/memredis"
)

// connect sets c.rdb to a client of the Redis that -u or REDIS_URL names
// and checks that it answers, or, without either, to an in-memory Redis
// started here. c.where says where it points, never with a password.
func (c *cli) connect(ctx context.Context, command string) error {
	raw, from := c.url, "-u"
	if raw == "" {
		raw, from = c.getenv("REDIS_URL"), "REDIS_URL"
	}
	if raw == "" {
		if c.cluster {
			return errors.New("--cluster needs a URL: give -u or set REDIS_URL")
		}
		if command == "create" || command == "restore" || command == "window --create" {
			// A filter or window made there would be gone before anyone
			// could use it.
			return fmt.Errorf("%s: no -u or REDIS_URL: it would be made in an in-memory Redis and vanish when rbloom exits; point rbloom at a real Redis with -u redis://host:port or REDIS_URL", command)
		}
		if command != "demo" {
			fmt.Fprintln(c.stderr, "rbloom: no -u or REDIS_URL: using an empty in-memory Redis that is gone when rbloom exits (only useful for demo)")
		}
		return c.connectInMemory()
	}
	// url.Parse quotes the whole URL in its errors, and go-redis returns
	// them as they are: say what is wrong without repeating the URL.
	if _, err := url.Parse(raw); err != nil {
		return fmt.Errorf("%s is not a valid URL: want redis://[user:pass@]host:port/db, or rediss:// for TLS", from)
	}
	if c.cluster {
		opt, err := redis.ParseClusterURL(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		c.rdb, c.where = redis.NewClusterClient(opt), "Redis Cluster at "+strings.Join(opt.Addrs, ",")
	} else {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		c.rdb, c.where = redis.NewClient(opt), "Redis at "+opt.Addr
	}
	// One PING, so that an unreachable server or a wrong password is
	// reported as such rather than as the failure of the command's first
	// read or write.
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connect to %s: %w", c.where, err)
	}
	return nil
}

// connectInMemory starts a miniredis that can run rbloom's scripts and
// points c.rdb at it.
func (c *cli) connectInMemory() error {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return fmt.Errorf("start in-memory Redis: %w", err)
	}
	if err := memredis.Register(m); err != nil {
		m.Close()
		return err
	}
	// The in-memory server lives in this process, and running rbloom's
	// scripts in it makes garbage: a short-lived command is faster
	// collecting it less often (the demo: 4.2-4.8 s at the default, 3.6-3.9
	// at 400, measured).
	debug.SetGCPercent(400)
	c.rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
	c.where = "in-memory Redis (set REDIS_URL to use a real one)"
	c.stopServer = m.Close
	return nil
}

// passwords returns what in the Redis URL raw may be a password, raw and
// unescaped, so that errorLine can remove it from messages. It reads the
// user info by hand as well as with url.Parse, because a URL that does not
// parse still holds its password.
func passwords(raw string) []string {
	var out []string
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p)
		}
	}
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return out
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return out
	}
	if _, p, ok := strings.Cut(rest[:at], ":"); ok && p != "" {
		out = append(out, p)
		if q, err := url.PathUnescape(p); err == nil && q != p {
			out = append(out, q)
		}
	}
	return out
}

// disconnect closes what connect opened.
func (c *cli) disconnect() {
	if c.rdb != nil {
		c.rdb.Close()
	}
	if c.stopServer != nil {
		c.stopServer()
	}
}
