package main

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// The example for real: a producer and three consumer processes on a real
// redis-server. Consumers die of SIGKILL in the middle of batches: some
// kill themselves at a chosen step (-crash-at), so that every step is hit,
// and the test kills others at random moments. A fresh consumer, with a
// new name, takes the place of each. At the end, every distinct click is
// counted exactly once, or was dropped as a false positive of the window.
func TestEndToEnd(t *testing.T) {
	const (
		clicks      = 30_000
		dupRate     = 0.15
		seed        = 42
		consumers   = 3
		randomKills = 4
		maxStarts   = consumers + randomKills + 8 // every death is replaced once
		rate        = 12_000                      // entries a second: the producer runs about 3 s
		minIdle     = 500 * time.Millisecond
		timeout     = 45 * time.Second
	)
	// The consumers started first and the first two replacements kill
	// themselves at these steps; "deduped:1" is likely a replay, since a
	// consumer claims before it reads.
	selfKills := []string{"read:3", "journaled:4", "deduped:5", "counted:3", "deduped:1"}

	addr := rbloomtest.StartRedis(t)
	bin := buildExample(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	s := settings{name: "clicks", eventsPerBucket: clicks, errorRate: 0.01, bucket: time.Hour, span: time.Hour, ttl: time.Hour}
	common := append([]string{"-redis", addr}, s.flags()...)
	begin := time.Now()

	exited := make(chan *proc, maxStarts)
	live := map[*proc]bool{}
	var all []*proc
	startConsumer := func() {
		if len(all) == maxStarts {
			t.Fatalf("%d consumers started: more deaths than the test causes", maxStarts)
		}
		name := fmt.Sprint("c", len(all)+1)
		args := append(slices.Clone(common), "-consumer", name, "-batch", "100", "-min-idle", minIdle.String())
		crashAt := ""
		if len(all) < len(selfKills) {
			crashAt = selfKills[len(all)]
			args = append(args, "-crash-at", crashAt)
		}
		p := start(t, name, bin, append([]string{"consume"}, args...), exited)
		p.crashAt = crashAt
		live[p] = true
		all = append(all, p)
	}
	for range consumers {
		startConsumer()
	}
	producer := start(t, "producer", bin, []string{"produce", "-redis", addr, "-name", s.name,
		"-events", fmt.Sprint(clicks), "-dup-rate", fmt.Sprint(dupRate), "-seed", fmt.Sprint(seed), "-rate", fmt.Sprint(rate)}, nil)

	// The random kills, at moments spread over the time the producer
	// runs, each of a consumer that will not kill itself, wherever it is
	// in its batch.
	rng := rand.New(rand.NewPCG(seed, 1))
	producing := time.Duration(clicks) * time.Second / rate // about
	var killTimes []time.Time
	for range randomKills {
		killTimes = append(killTimes, begin.Add(minIdle/2+time.Duration(rng.Int64N(int64(producing)))))
	}
	slices.SortFunc(killTimes, time.Time.Compare)
	kills := 0
	producerDone := producer.done
	deadline := begin.Add(timeout)
	for {
		if time.Now().After(deadline) {
			dumpLogs(t, all)
			t.Fatalf("the stream was not drained within %v", timeout)
		}
		next := deadline
		if kills < randomKills {
			next = killTimes[kills]
		}
		select {
		case p := <-exited:
			delete(live, p)
			if !p.diedOfSIGKILL() {
				dumpLogs(t, all)
				t.Fatalf("consumer %s exited by itself: %v", p.name, p.err)
			}
			startConsumer() // a fresh one, which will claim the dead one's entries
		case <-producerDone:
			if producer.err != nil {
				t.Fatalf("producer: %v\n%s", producer.err, producer.out.String())
			}
			producerDone = nil
		case <-time.After(min(time.Until(next), 50*time.Millisecond)):
			if kills == randomKills || time.Now().Before(next) {
				break
			}
			var victims []*proc
			for p := range live {
				if p.crashAt == "" && !p.killed { // not already dying
					victims = append(victims, p)
				}
			}
			if len(victims) == 0 {
				killTimes[kills] = next.Add(50 * time.Millisecond) // wait for a replacement
				break
			}
			slices.SortFunc(victims, func(a, b *proc) int { return strings.Compare(a.name, b.name) })
			victims[rng.IntN(len(victims))].kill()
			kills++
		}
		if producerDone == nil && kills == randomKills {
			if ok, err := drained(t.Context(), rdb, s.keys()); err != nil {
				t.Fatal(err)
			} else if ok {
				break
			}
		}
	}
	for p := range live {
		if err := p.stop(10 * time.Second); err != nil {
			t.Errorf("consumer %s: %v", p.name, err)
		}
	}
	elapsed := time.Since(begin)

	// What the processes said: where each killed itself, and the replays.
	selfKilled := map[string]int{}
	replays := 0
	for _, p := range all {
		log := p.out.String()
		for _, m := range regexp.MustCompile(`crash at step (\w+)`).FindAllStringSubmatch(log, -1) {
			selfKilled[m[1]]++
		}
		replays += strings.Count(log, "replaying batch")
	}
	for _, step := range steps {
		if selfKilled[step] == 0 {
			t.Errorf("no consumer killed itself at step %s", step)
		}
	}
	if replays == 0 {
		t.Error("no batch was replayed")
	}

	written := generate(s.name, clicks, dupRate, seed)
	a := auditOK(t, rdb, s, written)
	self := 0
	for _, n := range selfKilled {
		self += n
	}
	t.Logf("%d entries, %d distinct clicks, %d duplicates; %d consumers in all, %d killed: %d by themselves %v, %d by the test at random; %d batches replayed; drained in %v",
		a.Entries, a.Distinct, a.Entries-a.Distinct, len(all), len(all)-consumers, self, selfKilled, kills, replays, elapsed.Round(time.Millisecond))
	t.Logf("counted %d clicks; %d false positives of the window (%.3f%%; about %.1f expected at this fill; target %g%% at capacity)",
		a.Counted, a.Uncounted, 100*a.falsePositiveRate(), a.ExpectedFalsePositives, 100*a.TargetRate)
	if a.falsePositiveRate() > a.TargetRate {
		t.Errorf("false-positive rate %.3f%%, above the target %g%%", 100*a.falsePositiveRate(), 100*a.TargetRate)
	}
	if t.Failed() {
		dumpLogs(t, all)
	}
}

// dumpLogs logs the end of each process's output.
func dumpLogs(t *testing.T, ps []*proc) {
	t.Helper()
	for _, p := range ps {
		select {
		case <-p.done:
		default:
			continue // still running: its output is not ours to read yet
		}
		lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
		t.Logf("%s (-crash-at %q, killed by the test: %v, %v), last lines:\n%s",
			p.name, p.crashAt, p.killed, p.err, strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
}
