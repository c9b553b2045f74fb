package rbloom

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/rbloom/rbloom/rbloomtest"
)

// The specification of a counting filter, as a state machine checked
// against a model. The model keeps the multiset of items held and, for every
// counter, both its exact sum and the value the filter must show: the sum
// saturated at 15, where it then stays. Invariants, after every step:
//
//   - never a false negative: every item held tests true;
//   - every counter equals the model's value; while no counter has ever
//     reached 15, that is the exact sum of the items held;
//   - Count is never below an item's multiplicity, capped at 15.
//
// m is drawn small (1 to 64) most of the time, so that items collide and
// counters saturate often.

type countingMachine struct {
	rdb       redis.UniversalClient
	c         *Counting
	universe  []string
	held      map[string]int
	want      []int // what each counter must show
	exact     []int // the exact sum of each counter
	saturated bool  // some counter has reached 15
}

var machineNames atomic.Int64

func newCountingMachine(t *rapid.T, rdb redis.UniversalClient) *countingMachine {
	m := rapid.OneOf(rapid.Uint64Range(1, 64), rapid.Uint64Range(65, 4096)).Draw(t, "m")
	k := rapid.IntRange(1, 8).Draw(t, "k")
	parts := rapid.IntRange(1, int(min(4, m))).Draw(t, "partitions")
	name := fmt.Sprint("machine-", machineNames.Add(1))
	c, err := NewCounting(rdb, name, Options{Slots: m, Hashes: k, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	created(t, c)
	m = c.f.h.m * uint64(parts) // rounded up to whole partitions
	universe := make([]string, rapid.IntRange(1, 40).Draw(t, "universe"))
	for i := range universe {
		universe[i] = fmt.Sprint("item-", i)
	}
	return &countingMachine{rdb: rdb, c: c, universe: universe, held: map[string]int{},
		want: make([]int, m), exact: make([]int, m)}
}

func (cm *countingMachine) slots(item string) []uint64 {
	return globalSlots(cm.c.f, item)
}

// present reports whether the model shows all of item's counters non-zero.
func (cm *countingMachine) present(item string) bool {
	for _, s := range cm.slots(item) {
		if cm.want[s] == 0 {
			return false
		}
	}
	return true
}

func (cm *countingMachine) modelAdd(item string) (existed bool) {
	existed = cm.present(item)
	for _, s := range cm.slots(item) {
		cm.exact[s]++
		cm.want[s] = min(15, cm.want[s]+1)
		cm.saturated = cm.saturated || cm.want[s] == 15
	}
	cm.held[item]++
	return existed
}

func (cm *countingMachine) modelRemove(item string) {
	for _, s := range cm.slots(item) {
		cm.exact[s]--
		if cm.want[s] > 0 && cm.want[s] < 15 {
			cm.want[s]--
		}
	}
	if cm.held[item]--; cm.held[item] == 0 {
		delete(cm.held, item)
	}
}

func (cm *countingMachine) heldItems() []string {
	var out []string
	for _, item := range cm.universe {
		for range cm.held[item] {
			out = append(out, item)
		}
	}
	return out
}

func (cm *countingMachine) Add(t *rapid.T) {
	item := rapid.SampledFrom(cm.universe).Draw(t, "item")
	wantExisted := cm.modelAdd(item)
	if existed, err := cm.c.Add(ctx, item); err != nil || existed != wantExisted {
		t.Fatalf("Add(%q) = %v, %v; want %v", item, existed, err, wantExisted)
	}
}

func (cm *countingMachine) AddMany(t *rapid.T) {
	items := rapid.SliceOfN(rapid.SampledFrom(cm.universe), 0, 300).Draw(t, "items")
	want := make([]bool, len(items))
	for i, item := range items {
		want[i] = cm.modelAdd(item)
	}
	if got, err := cm.c.AddMany(ctx, items); err != nil || !slices.Equal(got, want) {
		t.Fatalf("AddMany(%q) = %v, %v; want %v", items, got, err, want)
	}
}

// TestOrAddMany adds, in order, only the items the model shows absent.
func (cm *countingMachine) TestOrAddMany(t *rapid.T) {
	items := rapid.SliceOfN(rapid.SampledFrom(cm.universe), 1, 100).Draw(t, "items")
	want := make([]bool, len(items))
	for i, item := range items {
		if want[i] = cm.present(item); !want[i] {
			cm.modelAdd(item)
		}
	}
	if got, err := cm.c.TestOrAddMany(ctx, items); err != nil || !slices.Equal(got, want) {
		t.Fatalf("TestOrAddMany(%q) = %v, %v; want %v", items, got, err, want)
	}
}

func (cm *countingMachine) Remove(t *rapid.T) {
	held := cm.heldItems()
	if len(held) == 0 {
		t.Skip("nothing held")
	}
	item := rapid.SampledFrom(held).Draw(t, "item")
	cm.modelRemove(item)
	if removed, err := cm.c.Remove(ctx, item); err != nil || !removed {
		t.Fatalf("Remove(%q) of a held item = %v, %v; want true", item, removed, err)
	}
}

// RemoveAbsent removes an item whose counters the model shows are not all
// non-zero: Remove must answer false and change nothing.
func (cm *countingMachine) RemoveAbsent(t *rapid.T) {
	item := rapid.SampledFrom(cm.universe).Draw(t, "item")
	if cm.present(item) {
		t.Skip("may be present: removing it would break the rule")
	}
	if removed, err := cm.c.Remove(ctx, item); err != nil || removed {
		t.Fatalf("Remove(%q) of an absent item = %v, %v; want false", item, removed, err)
	}
}

// RemoveMany removes a batch mixing held items with items that are
// definitely absent at their turn, possibly only because of removals earlier
// in the same batch: each must see the counters the ones before it left.
func (cm *countingMachine) RemoveMany(t *rapid.T) {
	var items []string
	var want []bool
	for _, item := range rapid.SliceOfN(rapid.SampledFrom(cm.universe), 1, 100).Draw(t, "items") {
		switch {
		case cm.held[item] > 0:
			cm.modelRemove(item)
			items, want = append(items, item), append(want, true)
		case !cm.present(item):
			items, want = append(items, item), append(want, false)
		} // else a false positive: removing it would break the rule
	}
	if got, err := cm.c.RemoveMany(ctx, items); err != nil || !slices.Equal(got, want) {
		t.Fatalf("RemoveMany(%q) = %v, %v; want %v", items, got, err, want)
	}
}

func (cm *countingMachine) Test(t *rapid.T) {
	item := rapid.SampledFrom(cm.universe).Draw(t, "item")
	if ok, err := cm.c.Test(ctx, item); err != nil || ok != cm.present(item) {
		t.Fatalf("Test(%q) = %v, %v; want %v (held %d times)", item, ok, err, cm.present(item), cm.held[item])
	}
}

func (cm *countingMachine) Count(t *rapid.T) {
	item := rapid.SampledFrom(cm.universe).Draw(t, "item")
	want := 15
	for _, s := range cm.slots(item) {
		want = min(want, cm.want[s])
	}
	if n, err := cm.c.Count(ctx, item); err != nil || n != want {
		t.Fatalf("Count(%q) = %d, %v; want %d (held %d times)", item, n, err, want, cm.held[item])
	}
}

// Check is run after every step.
func (cm *countingMachine) Check(t *rapid.T) {
	got := slotValues(t, cm.rdb, cm.c.f)
	if got == nil {
		got = make([]int, len(cm.want)) // not created yet: all zero
	}
	if !slices.Equal(got, cm.want) {
		t.Fatalf("counters = %v, want %v", got, cm.want)
	}
	if !cm.saturated && !slices.Equal(got, cm.exact) {
		t.Fatalf("counters = %v, exact sums %v", got, cm.exact)
	}
	items := slices.Collect(func(yield func(string) bool) {
		for item := range cm.held {
			if !yield(item) {
				return
			}
		}
	})
	slices.Sort(items)
	if len(items) == 0 {
		return
	}
	tested, err := cm.c.TestMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range tested {
		if !ok {
			t.Fatalf("false negative: %q is held %d times but tests false", items[i], cm.held[items[i]])
		}
	}
	for _, item := range items {
		n, err := cm.c.Count(ctx, item)
		if err != nil || n < min(15, cm.held[item]) {
			t.Fatalf("Count(%q) = %d, %v; it is held %d times", item, n, err, cm.held[item])
		}
	}
}

func (cm *countingMachine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"Add": cm.Add, "AddMany": cm.AddMany, "Remove": cm.Remove, "RemoveAbsent": cm.RemoveAbsent,
		"RemoveMany": cm.RemoveMany, "Test": cm.Test, "Count": cm.Count, "TestOrAddMany": cm.TestOrAddMany,
		"": cm.Check,
	}
}

func TestCountingMachineMiniredis(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.NewMiniredis(t).Addr()})
		defer rdb.Close()
		t.Repeat(newCountingMachine(t, rdb).actions())
	})
}

func TestCountingMachineRedis(t *testing.T) {
	rdb := realRedis(t)
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(newCountingMachine(t, rdb).actions())
	})
}
