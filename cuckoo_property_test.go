package rbloom

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// The specification of a cuckoo filter, as a state machine checked against
// a model: the multiset of items added and not removed. Filters are drawn
// tiny (1 to 24 buckets, 4 to 8 bit fingerprints), and the universe of
// items small, so that kicks, near-full filters, shared fingerprints and
// repeated items happen on most runs; half the runs lift the planned load
// to 1 (unplanned), so that inserts fail after their kicks. Invariants:
//
//   - never a false negative: every item held tests true, and Count is at
//     least its multiplicity;
//   - the filter holds exactly one fingerprint per copy held, and its
//     header counts them;
//   - an add that fails (ErrFull) changes no fingerprint; a remove of an
//     item held succeeds; one of an item that tests absent changes nothing.

type cuckooMachine struct {
	rdb      redis.UniversalClient
	c        *Cuckoo
	universe []string
	held     map[string]int
	fulls    int
}

func newCuckooMachine(t *rapid.T, rdb redis.UniversalClient) *cuckooMachine {
	m := rapid.Uint64Range(1, 24).Draw(t, "buckets")
	f := rapid.IntRange(MinFingerprintBits, 8).Draw(t, "fingerprint bits")
	parts := rapid.IntRange(1, int(min(2, m))).Draw(t, "partitions")
	name := fmt.Sprint("cuckoo-machine-", machineNames.Add(1))
	c, err := NewCuckoo(rdb, name, Options{Slots: m, Hashes: f, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	created(t, c)
	universe := make([]string, rapid.IntRange(1, int(8*m)+4).Draw(t, "universe"))
	for i := range universe {
		universe[i] = fmt.Sprint("item-", i)
	}
	return &cuckooMachine{rdb: rdb, c: c, universe: universe, held: map[string]int{}}
}

// addMany adds items, as AddMany or TestOrAddMany, and updates the model.
func (cm *cuckooMachine) addMany(t *rapid.T, items []string, onlyAbsent bool) {
	before := cuckooFingerprints(t, cm.rdb, cm.c.f)
	add := cm.c.AddMany
	if onlyAbsent {
		add = cm.c.TestOrAddMany
	}
	got, err := add(ctx, items)
	if errors.Is(err, ErrFull) {
		cm.fulls++
		// One call (items of one partition, all of them here: batches are
		// drawn within one partition) failed whole.
		if after := cuckooFingerprints(t, cm.rdb, cm.c.f); !slices.Equal(before, after) {
			t.Fatalf("a failed add of %q changed the fingerprints:\n%v\n%v", items, before, after)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, item := range items {
		if cm.held[item] > 0 && !got[i] {
			t.Fatalf("add of %q, held %d times, answered absent", item, cm.held[item])
		}
		if !onlyAbsent || !got[i] {
			cm.held[item]++
		}
	}
}

// batch draws up to 6 items of one partition.
func (cm *cuckooMachine) batch(t *rapid.T) []string {
	first := rapid.SampledFrom(cm.universe).Draw(t, "item")
	p, _, _, _ := cuckooLocate(first, cm.c.f.h.k, cm.c.f.h.m, len(cm.c.f.parts))
	items := []string{first}
	for range rapid.IntRange(0, 5).Draw(t, "more") {
		item := rapid.SampledFrom(cm.universe).Draw(t, "item")
		if q, _, _, _ := cuckooLocate(item, cm.c.f.h.k, cm.c.f.h.m, len(cm.c.f.parts)); q == p {
			items = append(items, item)
		}
	}
	return items
}

func (cm *cuckooMachine) Add(t *rapid.T) {
	cm.addMany(t, []string{rapid.SampledFrom(cm.universe).Draw(t, "item")}, false)
}

func (cm *cuckooMachine) AddMany(t *rapid.T) { cm.addMany(t, cm.batch(t), false) }

func (cm *cuckooMachine) TestOrAddMany(t *rapid.T) { cm.addMany(t, cm.batch(t), true) }

// AddAgain adds an item held, to make copies.
func (cm *cuckooMachine) AddAgain(t *rapid.T) {
	items := sortedKeys(cm.held)
	if len(items) == 0 {
		t.Skip("nothing held")
	}
	cm.addMany(t, []string{rapid.SampledFrom(items).Draw(t, "held")}, false)
}

func (cm *cuckooMachine) Remove(t *rapid.T) {
	items := sortedKeys(cm.held)
	if len(items) == 0 {
		t.Skip("nothing held")
	}
	item := rapid.SampledFrom(items).Draw(t, "held")
	if ok, err := cm.c.Remove(ctx, item); err != nil || !ok {
		t.Fatalf("Remove(%q) = %v, %v; it is held %d times", item, ok, err, cm.held[item])
	}
	if cm.held[item]--; cm.held[item] == 0 {
		delete(cm.held, item)
	}
}

// RemoveAbsent removes an item that tests absent: nothing changes.
func (cm *cuckooMachine) RemoveAbsent(t *rapid.T) {
	item := rapid.SampledFrom(cm.universe).Draw(t, "item")
	if must(cm.c.Test(ctx, item)).on(t) {
		t.Skip("tests present")
	}
	before := cuckooFingerprints(t, cm.rdb, cm.c.f)
	if ok, err := cm.c.Remove(ctx, item); err != nil || ok {
		t.Fatalf("Remove(%q) of an item that tests absent = %v, %v", item, ok, err)
	}
	if after := cuckooFingerprints(t, cm.rdb, cm.c.f); !slices.Equal(before, after) {
		t.Fatal("Remove of an absent item changed the fingerprints")
	}
}

// Check is run after every step.
func (cm *cuckooMachine) Check(t *rapid.T) {
	total := 0
	for _, n := range cm.held {
		total += n
	}
	fps := cuckooFingerprints(t, cm.rdb, cm.c.f)
	if n := countNonZero(fps); n != total {
		t.Fatalf("%d fingerprints stored, %d copies held", n, total)
	}
	in := must(cm.c.Info(ctx)).on(t)
	if in.Items != int64(total) || in.NonZero != uint64(total) {
		t.Fatalf("Info: Items %d, NonZero %d; %d held", in.Items, in.NonZero, total)
	}
	items := sortedKeys(cm.held)
	if len(items) == 0 {
		return
	}
	tested := must(cm.c.TestMany(ctx, items)).on(t)
	counts := must(cm.c.CountMany(ctx, items)).on(t)
	for i, item := range items {
		if !tested[i] || counts[i] < cm.held[item] {
			t.Fatalf("false negative: %q is held %d times; Test %v, Count %d", item, cm.held[item], tested[i], counts[i])
		}
	}
}

func (cm *cuckooMachine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"Add": cm.Add, "AddMany": cm.AddMany, "TestOrAddMany": cm.TestOrAddMany, "AddAgain": cm.AddAgain,
		"Remove": cm.Remove, "RemoveAbsent": cm.RemoveAbsent, "": cm.Check,
	}
}

func TestCuckooMachine(t *testing.T) {
	cuckooMachines(t, realRedis(t))
}

// TestCuckooClusterMachine runs the machine on the 3-master cluster, its
// partitions on different masters.
func TestCuckooClusterMachine(t *testing.T) {
	_, rdb := clusterClient(t)
	cuckooMachines(t, rdb)
}

func cuckooMachines(t *testing.T, rdb redis.UniversalClient) {
	for _, variant := range []string{"planned", "unplanned"} {
		t.Run(variant, func(t *testing.T) {
			if variant == "unplanned" {
				withCuckooLua(t, unplanned)
			}
			fulls := 0
			rapid.Check(t, func(t *rapid.T) {
				cm := newCuckooMachine(t, rdb)
				t.Repeat(cm.actions())
				fulls += cm.fulls
			})
			if fulls == 0 {
				t.Error("no add failed: the machine did not reach a full filter")
			}
		})
	}
}
