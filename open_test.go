package rbloom

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestOpen(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "shared", Options{Capacity: 5000, ErrorRate: 0.001}))
		must(c.AddMany(ctx, []string{"a", "b"})).on(t)
		f := must(Open(ctx, rdb, "shared", Options{})).on(t)
		oc, ok := f.(*Counting)
		if !ok {
			t.Fatalf("Open = %T, want *Counting", f)
		}
		if ok := must(oc.Test(ctx, "a")).on(t); !ok {
			t.Error("opened filter: Test(a) = false")
		}
		if ok := must(oc.Remove(ctx, "b")).on(t); !ok {
			t.Error("opened filter: Remove(b) = false")
		}
		if in := must(oc.Info(ctx)).on(t); in.Capacity != 5000 || in.ErrorRate != 0.001 || in.Items != 1 {
			t.Errorf("opened filter: Info = %+v", in)
		}
		must(created(t, newClassicT(t, rdb, "bits", Options{Capacity: 10})).Add(ctx, "x")).on(t)
		if f := must(Open(ctx, rdb, "bits", Options{})).on(t); f == nil {
			t.Error("Open(bits) = nil")
		} else if _, ok := f.(*Classic); !ok {
			t.Errorf("Open(bits) = %T, want *Classic", f)
		}
		if _, err := Open(ctx, rdb, "nobody", Options{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(nobody) error = %v, want ErrNotFound", err)
		}
		rdb.Set(ctx, keyOf(DefaultKeyPrefix, "plain"), "hello", 0)
		if _, err := Open(ctx, rdb, "plain", Options{}); !errors.Is(err, ErrNotFilter) {
			t.Errorf("Open(plain) error = %v, want ErrNotFilter", err)
		}
		if err := c.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, rdb, "shared", Options{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open after Drop: error = %v, want ErrNotFound", err)
		}
	})
}

// TestOpenLostRoot: when the partition at rbloom:{name} is the one
// missing, Open must say the filter is damaged, not that it does not
// exist.
func TestOpenLostRoot(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, parts := range []int{2, 3, 7} {
			name := fmt.Sprint("open-root-", parts)
			c := created(t, newCounting(t, rdb, name, Options{Capacity: 2000, Partitions: parts}))
			heldItems(t, c, 50)
			rdb.Del(ctx, keyOf(DefaultKeyPrefix, name))
			if _, err := Open(ctx, rdb, name, Options{}); !errors.Is(err, ErrDamaged) {
				t.Errorf("P=%d, root lost: Open = %v, want ErrDamaged", parts, err)
			}
			c.Drop(ctx)
			if _, err := Open(ctx, rdb, name, Options{}); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d, dropped: Open = %v, want ErrNotFound", parts, err)
			}
		}
	})
}

// TestOpenTyped: OpenCounting and OpenClassic return the type opened,
// refuse the other mode and sizing options, and apply the handle's
// settings.
func TestOpenTyped(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		must(created(t, newCounting(t, rdb, "counts", Options{Capacity: 1000, Partitions: 2})).Add(ctx, "a")).on(t)
		must(created(t, newClassicT(t, rdb, "bits", Options{Capacity: 1000})).Add(ctx, "a")).on(t)

		c, err := OpenCounting(ctx, rdb, "counts", Options{MaxItems: 2})
		if err != nil || !must(c.Test(ctx, "a")).on(t) || must(c.Count(ctx, "a")).on(t) != 1 {
			t.Fatalf("OpenCounting = %v; Test(a) false or Count(a) not 1", err)
		}
		if _, err := c.AddMany(ctx, []string{"b", "c", "d", "e"}); !errors.Is(err, ErrFull) {
			t.Errorf("AddMany past the opened handle's MaxItems: %v, want ErrFull", err)
		}
		b, err := OpenClassic(ctx, rdb, "bits", Options{})
		if err != nil || !must(b.Test(ctx, "a")).on(t) {
			t.Fatalf("OpenClassic = %v, or Test(a) false", err)
		}
		if _, err := OpenCounting(ctx, rdb, "bits", Options{}); !errors.Is(err, ErrParamsMismatch) {
			t.Errorf("OpenCounting of a classic filter: %v, want ErrParamsMismatch", err)
		}
		if _, err := OpenClassic(ctx, rdb, "counts", Options{}); !errors.Is(err, ErrParamsMismatch) {
			t.Errorf("OpenClassic of a counting filter: %v, want ErrParamsMismatch", err)
		}
		if _, err := OpenCounting(ctx, rdb, "counts", Options{Capacity: 1000}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("OpenCounting with Capacity: %v, want ErrInvalidOptions", err)
		}
		if _, err := OpenCounting(ctx, rdb, "missing", Options{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("OpenCounting of a missing filter: %v, want ErrNotFound", err)
		}
		guarded, err := OpenCounting(ctx, rdb, "counts", Options{})
		if err != nil {
			t.Fatal(err)
		}
		rdb.FlushAll(ctx)
		if _, err := guarded.Test(ctx, "a"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Test from OpenCounting after a flush: %v, want ErrNotFound", err)
		}
	})
}

// TestKeyPrefix: filters of one name under two prefixes are two filters;
// every key a filter writes, records included, starts with its prefix; Open
// finds a filter under its prefix only.
func TestKeyPrefix(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		a := created(t, newCounting(t, rdb, "users", Options{Capacity: 1000, Partitions: 3, KeyPrefix: "app-a:bloom:"}))
		b := created(t, newCounting(t, rdb, "users", Options{Capacity: 1000, Partitions: 3, KeyPrefix: "app-b:"}))
		must(a.AddMany(ctx, []string{"x", "y"})).on(t)
		must(a.AddOnce(ctx, "z", "evt-1")).on(t)
		if must(b.Test(ctx, "x")).on(t) {
			t.Error("a filter under another prefix holds x")
		}
		must(b.Add(ctx, "w")).on(t)
		for k := range dump(t, rdb) {
			if !strings.HasPrefix(k, "app-a:bloom:{users") && !strings.HasPrefix(k, "app-b:{users") {
				t.Errorf("key %q is under neither prefix", k)
			}
		}
		o, err := OpenCounting(ctx, rdb, "users", Options{KeyPrefix: "app-a:bloom:"})
		if err != nil || !must(o.Test(ctx, "z")).on(t) || must(o.Test(ctx, "w")).on(t) {
			t.Errorf("OpenCounting under app-a: %v, or it does not hold z alone", err)
		}
		if _, err := Open(ctx, rdb, "users", Options{}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "rbloom:{users}") {
			t.Errorf("Open under the default prefix: %v, want ErrNotFound naming rbloom:{users}", err)
		}
		if f, err := Open(ctx, rdb, "users", Options{KeyPrefix: "app-a:bloom:"}); err != nil || !must(f.Test(ctx, "z")).on(t) {
			t.Errorf("Open under app-a: %v, or it does not hold z", err)
		}
		rdb.Del(ctx, a.f.parts[shareOf(keySlot("users"), 3)].key)
		if _, err := OpenCounting(ctx, rdb, "users", Options{KeyPrefix: "app-a:bloom:"}); !errors.Is(err, ErrDamaged) {
			t.Errorf("OpenCounting with the root lost under app-a: %v, want ErrDamaged", err)
		}
		for _, bad := range []string{"a{b", "}", "tab\t", strings.Repeat("p", 65)} {
			if _, err := NewCounting(rdb, "users", Options{Capacity: 10, KeyPrefix: bad}); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("KeyPrefix %q: %v, want ErrInvalidOptions", bad, err)
			}
		}
	})
}
