package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/rbloom/rbloom"
)

// list finds the filters of a Redis by their keys, with SCAN, and tells
// them from the other keys with the exported API alone (Open and Info):
//
//	rbloom:{X}            the root partition of filter X, which Open finds;
//	                      or, when X is "Y/j", partition j of filter Y (no
//	                      filter may have such a name): Y is listed, found
//	                      damaged if its root partition is lost
//	rbloom:{X}:next, ...  a rebuild's copy, an operation record: SCAN's
//	                      MATCH leaves them out
//
// A key that holds something else (Open fails with ErrNotFilter) is not
// listed; a damaged filter is, as "damaged".

const (
	listMatch = "rbloom:{*}" // SCAN MATCH: keys that end at the tag's "}"
	listCount = 1000         // SCAN COUNT: keys Redis looks at per call
)

// partitionTag matches the tag of a partition other than the root: Y/j.
var partitionTag = regexp.MustCompile(`^(.+)/[0-9]+$`)

func setupList(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	var limit int
	fs.Var(newWhole(&limit, 10_000, 1), "limit", "read at most `N` keys found by SCAN, saying so on stderr when there may be more")
	return func(ctx context.Context, _ []string) error {
		keys, more, err := scanKeys(ctx, c.rdb, limit)
		if err != nil {
			return err
		}
		l := &lister{rdb: c.rdb, infos: map[string]*listed{}}
		for _, key := range keys {
			if err := l.key(ctx, key); err != nil {
				return err
			}
		}
		slices.Sort(l.names)
		for _, name := range l.names {
			fmt.Fprintln(c.out, l.infos[name].line(name))
		}
		if more {
			fmt.Fprintf(c.stderr, "rbloom: warning: list stopped after %d keys (--limit %d): there may be more filters\n", len(keys), limit)
		}
		return nil
	}
}

// scanKeys returns the keys that match listMatch, at most limit of them,
// and whether it stopped before it had seen them all. On a cluster it
// scans every master, at once.
func scanKeys(ctx context.Context, rdb redis.UniversalClient, limit int) (keys []string, more bool, err error) {
	var mu sync.Mutex
	scan := func(ctx context.Context, client *redis.Client) error {
		var cursor uint64
		for {
			mu.Lock()
			full := len(keys) >= limit
			more = more || full // this node's scan is not done
			mu.Unlock()
			if full {
				return nil
			}
			batch, next, err := client.Scan(ctx, cursor, listMatch, listCount).Result()
			if err != nil {
				return fmt.Errorf("scan %s: %w", client.Options().Addr, err)
			}
			mu.Lock()
			take := min(len(batch), limit-len(keys))
			keys = append(keys, batch[:take]...)
			more = more || take < len(batch)
			mu.Unlock()
			if next == 0 || take < len(batch) {
				return nil
			}
			cursor = next
		}
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("cannot scan through a %T", rdb)
	}
	return keys, more, err
}

// A lister sorts the keys that scanKeys found into filters.
type lister struct {
	rdb   redis.UniversalClient
	infos map[string]*listed // by name, whether a filter or not
	names []string           // the filters, to print
}

// listed is what Open and Info said of a name.
type listed struct {
	filter  bool         // whether it is a filter, to be listed
	damaged bool         // Open or Info found it damaged
	info    *rbloom.Info // nil when Open failed
	added   bool         // whether it is in lister.names
}

// line is the line list prints for the filter l: name, mode, partitions,
// items and bytes, tab-separated; "damaged" for the mode of a damaged
// filter, "-" for what Open could not read.
func (l *listed) line(name string) string {
	if l.info == nil {
		return printable(name) + "\tdamaged\t-\t-\t-"
	}
	mode := l.info.Mode.String()
	if l.damaged {
		mode = "damaged"
	}
	return strings.Join([]string{printable(name), mode, strconv.Itoa(len(l.info.Partitions)),
		strconv.FormatInt(l.info.Items, 10), strconv.FormatInt(l.info.Bytes, 10)}, "\t")
}

// key sorts one key.
func (l *lister) key(ctx context.Context, key string) error {
	tag, ok1 := strings.CutPrefix(key, "rbloom:{")
	tag, ok2 := strings.CutSuffix(tag, "}")
	if !ok1 || !ok2 || strings.ContainsAny(tag, "{}") {
		return nil // not a partition of rbloom's
	}
	name := tag
	if m := partitionTag.FindStringSubmatch(tag); m != nil {
		name = m[1]
	}
	x, err := l.open(ctx, name)
	if err != nil {
		return err
	}
	l.add(name, x)
	return nil
}

// add puts the filter name on the list, once.
func (l *lister) add(name string, x *listed) {
	if x.filter && !x.added {
		x.added = true
		l.names = append(l.names, name)
	}
}

// open opens the filter name and reads its Info, once per name. A name
// that is not a filter, or no longer, is not an error.
func (l *lister) open(ctx context.Context, name string) (*listed, error) {
	if x, ok := l.infos[name]; ok {
		return x, nil
	}
	x, err := openListed(ctx, l.rdb, name)
	if err != nil {
		return nil, err
	}
	l.infos[name] = x
	return x, nil
}

func openListed(ctx context.Context, rdb redis.UniversalClient, name string) (*listed, error) {
	// Not a filter: no such key (deleted since the scan), another type, a
	// partition of another filter, a name Open refuses.
	notFilter := func(err error) bool {
		return errors.Is(err, rbloom.ErrNotFound) || errors.Is(err, rbloom.ErrNotFilter) || errors.Is(err, rbloom.ErrInvalidOptions)
	}
	f, err := rbloom.Open(ctx, rdb, name, rbloom.Options{})
	var in *rbloom.Info
	if err == nil {
		in, err = f.Info(ctx)
	}
	switch {
	case errors.Is(err, rbloom.ErrDamaged):
		return &listed{filter: true, damaged: true}, nil
	case notFilter(err):
		return &listed{}, nil
	case err != nil:
		return nil, err
	}
	if !in.Exists { // dropped since
		return &listed{}, nil
	}
	return &listed{filter: true, damaged: in.Damaged, info: in}, nil
}
