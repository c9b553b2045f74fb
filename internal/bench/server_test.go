package bench

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=9260,usec=1234567,usec_per_call=133.32,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_bitfield_ro:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"\r\n# Latencystats\r\n" +
		"latency_percentiles_usec_evalsha:p100=376.831\r\n" +
		"latency_percentiles_usec_info:p100=20.1\r\n"
	got, err := parseStats(info)
	if err != nil {
		t.Fatal(err)
	}
	want := cmdStats{
		"evalsha":     {calls: 9260, usec: 1234567, max: 376831 * time.Nanosecond},
		"bitfield_ro": {calls: 10, usec: 20},
	}
	if len(got) != len(want) {
		t.Errorf("parseStats = %v, want %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("parseStats: %s = %+v, want %+v", name, got[name], w)
		}
	}
	if got.usec() != 1234567 {
		t.Errorf("usec() = %d, want the scripts' time only, 1234567", got.usec())
	}
}

// TestServerTime: a row's server time counts each command the benchmark
// sent once: a script's or a transaction's with the commands it ran, which
// INFO counts under their own names too, and the share of a command's
// calls that it sent on its own.
func TestServerTime(t *testing.T) {
	stats := cmdStats{
		"evalsha":     {calls: 10, usec: 1000},
		"exec":        {calls: 5, usec: 500},
		"multi":       {calls: 5, usec: 1, sent: 5},
		"bitfield_ro": {calls: 20, usec: 400, sent: 10}, // 5 in the transactions, 5 in the scripts
		"hmget":       {calls: 15, usec: 30},            // in the scripts and the transactions only
	}
	if got, want := stats.usec(), int64(1000+500+1+200); got != want {
		t.Errorf("usec() = %d, want %d", got, want)
	}
}

func TestStartServer(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found on PATH ($CI is set, so this is a failure, not a skip)")
		}
		t.Skip("redis-server not found on PATH")
	}
	ctx := context.Background()
	s, err := StartServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkLoopback("tcp", s.Addr); err != nil {
		t.Error(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		c.Close()
		t.Error("the server still accepts connections after Close")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("its directory %s is still there (%v)", s.dir, err)
	}
}
