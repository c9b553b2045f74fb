package pgsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// One sync at a time keeps a filter, whatever its flags: two syncs of one
// filter through one slot drop each other's slot during a load, and
// through two slots apply every change twice. PostgreSQL cannot tell them
// apart (their slots, or even servers, may differ), so the filter holds
// the lock: a lease key "<prefix>{<filter>}:pgsync:lease" next to the
// state, taken before Run reads the state and renewed while it runs.
//
// A holder that dies stops renewing, and its lease lapses after leaseTTL.
// Sooner, when the holder's PostgreSQL session is gone: the lease names
// the holder's cluster (system identifier) and its session (backend pid
// and start), and a sync connected to the same cluster that finds no such
// session takes the lease over at once (a SIGKILLed sync's session ends
// with its socket).
const (
	leaseTTL   = 15 * time.Second
	leaseRenew = time.Second
)

// lease is one Run's hold on the filter.
type lease struct {
	rdb   redis.UniversalClient
	key   string
	value string // token|sysid|backend pid|backend start (µs)|host:pid
}

// holder is a lease's value, parsed.
type holder struct {
	token, sysid, pid, start, who string
}

func parseHolder(v string) holder {
	f := strings.SplitN(v, "|", 5)
	for len(f) < 5 {
		f = append(f, "")
	}
	return holder{token: f[0], sysid: f[1], pid: f[2], start: f[3], who: f[4]}
}

// newToken names one Sync: its runs may take over the leases it left.
func newToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func leaseKey(prefix, filter string) string { return stateKey(prefix, filter) + ":lease" }

// casScript sets KEYS[1] to ARGV[2] for ARGV[3] ms if it holds ARGV[1]
// ("" for missing); returns 1 if it did.
var casScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if (v or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`)

// renewScript extends the lease while KEYS[1] holds ARGV[1]; returns the
// value found otherwise (” for missing).
var renewScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 'ok'
end
return v or ''
`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 'ok'
`)

// takeLease takes the filter's lease for this run, waiting up to wait for
// a holder that is alive; ErrBusy after that.
func (s *Sync) takeLease(ctx context.Context, db *pgx.Conn, sysid string) (*lease, error) {
	cfg := s.cfg
	var pid int32
	var start int64
	if err := db.QueryRow(ctx, `SELECT pid, (extract(epoch FROM backend_start) * 1e6)::int8 FROM pg_stat_activity WHERE pid = pg_backend_pid()`).
		Scan(&pid, &start); err != nil {
		return nil, fmt.Errorf("pgsync: postgres: own session: %w", err)
	}
	host, _ := os.Hostname()
	l := &lease{rdb: cfg.Redis, key: leaseKey(cfg.KeyPrefix, cfg.Filter),
		value: fmt.Sprintf("%s|%s|%d|%d|%s:%d", s.token, sysid, pid, start, host, os.Getpid())}
	deadline := time.Now().Add(cfg.SlotWait)
	for {
		cur, err := cfg.Redis.Get(ctx, l.key).Result()
		if err != nil && err != redis.Nil {
			return nil, fmt.Errorf("pgsync: redis: lease %s: %w", l.key, err)
		}
		h := parseHolder(cur)
		free := cur == "" || h.token == s.token
		if !free && h.sysid == sysid {
			if free, err = sessionGone(ctx, db, h); err != nil {
				return nil, err
			}
		}
		if free {
			ok, err := casScript.Run(ctx, cfg.Redis, []string{l.key}, cur, l.value, leaseTTL.Milliseconds()).Int()
			if err != nil {
				return nil, fmt.Errorf("pgsync: redis: lease %s: %w", l.key, err)
			}
			if ok == 1 {
				return l, nil
			}
			// Taken meanwhile: look again after the pause, if time is left.
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: another sync (%s) follows filter %s (it holds %s): stop it first; a sync that died releases it within %v",
				ErrBusy, h.who, cfg.Filter, l.key, leaseTTL)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sessionGone reports whether the PostgreSQL session a holder named (on
// this cluster) has ended. Another user's session shows its pid but not
// its start to a user without pg_read_all_stats: such a pid is taken for
// the holder's, alive.
func sessionGone(ctx context.Context, db *pgx.Conn, h holder) (bool, error) {
	var alive bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid::text = $1
		AND (backend_start IS NULL OR (extract(epoch FROM backend_start) * 1e6)::int8::text = $2))`, h.pid, h.start).Scan(&alive)
	if err != nil {
		return false, fmt.Errorf("pgsync: postgres: sessions: %w", err)
	}
	return !alive, nil
}

// hold renews the lease until ctx is done, and calls lost when another
// sync holds it or it is gone.
func (l *lease) hold(ctx context.Context, filter string, lost func(error)) {
	tick := time.NewTicker(leaseRenew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		v, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.value, leaseTTL.Milliseconds()).Text()
		switch {
		case err != nil || v == "ok":
			continue // Redis unreachable: the sync's own calls fail too
		case v == "":
			lost(fmt.Errorf("%w: the lease %s of filter %s is gone from Redis (FLUSHALL, eviction, or a restart without persistence): the filter and its state may be gone too; check them, and reload if they are",
				ErrFilter, l.key, filter))
		default:
			lost(fmt.Errorf("%w: another sync (%s) took over filter %s while this one ran (this one stalled longer than %v?): this one stops",
				ErrBusy, parseHolder(v).who, filter, leaseTTL))
		}
		return
	}
}

// release gives the lease up, if this run still holds it.
func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = releaseScript.Run(ctx, l.rdb, []string{l.key}, l.value).Err()
}
