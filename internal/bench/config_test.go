package bench

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestCheckLoopback(t *testing.T) {
	for _, tc := range []struct {
		network, addr string
		ok            bool
	}{
		{"tcp", "127.0.0.1:6379", true},
		{"tcp", "127.1.2.3:6379", true},
		{"tcp", "localhost:6379", true},
		{"tcp", "[::1]:6379", true},
		{"unix", "/tmp/redis.sock", true},
		{"tcp", "10.0.0.1:6379", false},
		{"tcp", "192.168.1.1:6379", false},
		{"tcp", "redis.example.com:6379", false},
		{"tcp", "[::]:6379", false},
		{"tcp", "127.0.0.1", false}, // no port
	} {
		if err := checkLoopback(tc.network, tc.addr); (err == nil) != tc.ok {
			t.Errorf("checkLoopback(%q, %q) = %v, want ok %v", tc.network, tc.addr, err, tc.ok)
		}
	}
}

// TestRunRefuses checks the configurations Run refuses before it sends
// anything: nothing is listening at these addresses, and none is dialled.
func TestRunRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"remote", Config{Addr: "10.0.0.1:6379"}, "not on the loopback interface"},
		{"remote client", Config{Client: redis.NewClient(&redis.Options{Addr: "192.0.2.1:6379"})}, "not on the loopback interface"},
		{"no Redis", Config{}, "no Redis"},
		{"N", Config{Addr: "127.0.0.1:1", N: 1}, "N = 1"},
		{"P", Config{Addr: "127.0.0.1:1", P: 1}, "P = 1"},
		{"Batch", Config{Addr: "127.0.0.1:1", Batch: -1}, "Batch = -1"},
		{"Rounds", Config{Addr: "127.0.0.1:1", Rounds: -2}, "Rounds = -2"},
		{"ChartBatches", Config{Addr: "127.0.0.1:1", ChartBatches: []int{10, 0}}, "ChartBatches"},
		{"Timeout", Config{Addr: "127.0.0.1:1", Timeout: -time.Second}, "Timeout"},
		{"Chart without Draw", Config{Addr: "127.0.0.1:1", Chart: "x.png"}, "Draw is nil"},
		{"WindowGens", Config{Addr: "127.0.0.1:1", WindowGens: 101}, "WindowGens = 101"},
		{"Records", Config{Addr: "127.0.0.1:1", Records: -1}, "Records = -1"},
	} {
		var out bytes.Buffer
		err := Run(context.Background(), tc.cfg, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Run = %v, want an error saying %q", tc.name, err, tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("%s: Run wrote %q on error", tc.name, out.String())
		}
	}
}

func TestDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if c.N != 1_000_000 || c.P != 0.01 || c.Batch != 1_000 || c.Rounds != 3 || c.SeedItems != 2_000 || len(c.ChartBatches) != 5 ||
		c.WindowGens != 24 || c.Records != 20_000 {
		t.Errorf("defaults = %+v", c)
	}
	q := Config{Quick: true, Rounds: 2}.withDefaults()
	if q.N != 5_000 || q.Rounds != 2 || q.Timeout != time.Minute || len(q.ChartBatches) != 3 || q.WindowGens != 24 || q.Records != 500 {
		t.Errorf("quick defaults with Rounds 2 = %+v", q)
	}
}

func TestRegisterFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if fs.Lookup("chart") != nil {
		t.Error("RegisterFlags defines -chart: a program without Draw would offer it")
	}
	c.RegisterChartFlags(fs)
	err := fs.Parse([]string{"-addr", "127.0.0.1:7000", "-n", "10", "-p", "0.001", "-batch", "5",
		"-rounds", "2", "-chart", "x.png", "-quick", "-timeout", "30s", "-window-gens", "2", "-records", "100"})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Addr: "127.0.0.1:7000", N: 10, P: 0.001, Batch: 5, Rounds: 2, Chart: "x.png", Quick: true, Timeout: 30 * time.Second,
		WindowGens: 2, Records: 100}
	if c.Addr != want.Addr || c.N != want.N || c.P != want.P || c.Batch != want.Batch || c.Rounds != want.Rounds ||
		c.Chart != want.Chart || c.Quick != want.Quick || c.Timeout != want.Timeout || c.WindowGens != want.WindowGens || c.Records != want.Records {
		t.Errorf("after flags: %+v, want %+v", c, want)
	}
}
