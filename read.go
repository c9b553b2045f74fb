package rbloom

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Reads need no script and never write: for each partition they touch they
// send, in one pipeline, the header (GETRANGE), the length (STRLEN) and the
// slots of its items with BITFIELD_RO, which cannot create or grow a key. A
// partition's header never changes once written, and each BITFIELD_RO reads
// all k slots of an item at once, so every item is answered from one
// consistent state of its slots.
//
// A partition that reads as missing (an empty header) needs a second look:
// the whole filter is missing (ErrNotFound, or "absent" for a handle with
// Options.CreateOnWrite), or only that partition is (its items' counts
// are unknown). The partitions of a filter are created together, and any
// one that exists proves the filter does, so survey asks every partition.
// This costs a round trip only for a filter that does not exist or is
// damaged. A partition being loaded (MARK_LOAD) fails the read with
// ErrLoading: its slots do not hold every item yet.

// partRead is what one transaction (or read.lua call) reads of one
// partition.
type partRead struct {
	p       int
	head    *redis.StringCmd
	size    *redis.IntCmd
	slots   []*redis.IntSliceCmd
	answers [][]int // the positions each BITFIELD_RO answers for
}

// minSlots returns for each item the smallest of its k slots: 0 means
// definitely absent. An item in a missing partition of a filter that
// exists reads 15: its count is unknown.
func (f *filter) minSlots(ctx context.Context, op string, items []string) ([]int64, error) {
	mins := make([]int64, len(items))
	for lo, hi := range spans(len(items), f.perRoundTrip()) {
		if err := f.readChunk(ctx, items[lo:hi], mins[lo:hi]); err != nil {
			return nil, callError(op, err)
		}
	}
	return mins, nil
}

// readChunk sets mins for the items of chunk, in one round trip (two
// when a partition is missing).
func (f *filter) readChunk(ctx context.Context, chunk []string, mins []int64) error {
	pl := f.place(chunk)
	var reads []*partRead
	err := readAgain(ctx, func() (err error) {
		reads, err = f.sendReads(ctx, pl)
		return err
	})
	for _, r := range reads {
		if redis.HasErrorPrefix(r.head.Err(), "WRONGTYPE") {
			return anotherType(f.parts[r.p].key)
		}
	}
	if err != nil {
		return err
	}
	var s *survey // asked once a partition reads as missing
	for _, r := range reads {
		if r.head.Val() != "" {
			if err := f.check(r.p, r.head.Val(), r.size.Val()); err != nil {
				return err
			}
			if r.head.Val()[markByte] == markLoad {
				return f.loadingErr(r.p)
			}
			continue
		}
		if s == nil {
			if s, err = f.survey(ctx); err != nil {
				return err
			}
			if !s.any && !f.onWrite {
				return f.missing()
			}
		}
		if s.exists[r.p] && s.size[r.p] == 0 {
			return f.check(r.p, "", 0) // a key holding an empty string
		}
	}
	for _, r := range reads {
		if r.head.Val() == "" {
			// The filter exists (some partition does), so this one
			// vanished, or was created since the read: its items' counts
			// are unknown. Otherwise the filter is empty.
			if s.any {
				for _, group := range r.answers {
					for _, pos := range group {
						mins[pos] = 15
					}
				}
			}
			continue
		}
		n := f.readsPerItem()
		for c, cmd := range r.slots {
			vals := cmd.Val()
			if len(vals) != len(r.answers[c])*n {
				return fmt.Errorf("BITFIELD_RO answered %d values, want %d", len(vals), len(r.answers[c])*n)
			}
			for j, pos := range r.answers[c] {
				mins[pos] = f.value(vals[j*n:(j+1)*n], pl, pos)
			}
		}
	}
	return nil
}

// sendReads sends the reads of the items placed by pl, in transactions
// (MULTI, EXEC) of bounded size (transact), each with the header check of
// the slots it reads: in a plain pipeline, Redis
// may run another client's commands between the header check and the
// slot reads, and a partition deleted, expired or replaced (a resize's
// switch) in between would read as zeros, or at the wrong positions:
// "absent" for items it held.
func (f *filter) sendReads(ctx context.Context, pl placement) ([]*partRead, error) {
	reads, err := f.queueReads(ctx, pl)
	if redis.HasErrorPrefix(err, "EXECABORT") {
		// A Redis out of memory refuses to queue commands in a
		// transaction, reads included; a script that only reads still
		// runs. (Reading the header again after the slots, as before,
		// missed a key renamed away and back in between.)
		reads, err = f.scriptReads(ctx, pl)
	}
	return reads, err
}

// queueReads sends the reads of sendReads in transactions.
func (f *filter) queueReads(ctx context.Context, pl placement) ([]*partRead, error) {
	n := f.readsPerItem()
	perCall := maxCallSlots / n // a cuckoo filter's reads take more items than its writes
	var reads []*partRead
	units := unitsOf(pl.groups, max(1, maxTxSlots/n), func(int) bool { return false }, func(p int, items []int) txUnit {
		r := &partRead{p: p}
		reads = append(reads, r)
		return txUnit{p: p, slots: len(items) * n, queue: func(pipe redis.Pipeliner) {
			key := f.parts[p].key
			r.head, r.size = pipe.GetRange(ctx, key, 0, headerSize-1), pipe.StrLen(ctx, key)
			for a, b := range spans(len(items), perCall) {
				args := make([]any, 0, 2+(b-a)*n*3)
				args = f.getArgs(append(args, "BITFIELD_RO", key), pl, items[a:b])
				cmd := redis.NewIntSliceCmd(ctx, args...)
				_ = pipe.Process(ctx, cmd)
				r.slots, r.answers = append(r.slots, cmd), append(r.answers, items[a:b])
			}
		}}
	})
	return reads, f.transact(ctx, units, maxTxSlots)
}

// scriptReads is queueReads out of memory, where Redis refuses
// transactions: each unit of reads is one call of read.lua, which reads
// the header, the length and the slots in one step (a script that only
// reads still runs), all in one pipeline.
func (f *filter) scriptReads(ctx context.Context, pl placement) ([]*partRead, error) {
	n := f.readsPerItem()
	var calls []scriptCall
	var reads []*partRead
	for p, group := range pl.groups {
		for a, z := range spans(len(group), max(1, maxTxSlots/n)) {
			calls = append(calls, scriptCall{keys: []string{f.parts[p].key}, args: f.getArgs([]any{headerSize}, pl, group[a:z])})
			reads = append(reads, &partRead{p: p, answers: [][]int{group[a:z]}})
		}
	}
	cmds, err := pipelineScripts(ctx, f.rdb, readScript, false, calls, replication{})
	if err != nil {
		return nil, err
	}
	for i, r := range reads {
		vals, err := cmds[i].Slice()
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			r.head, r.size = redis.NewStringResult("", err), redis.NewIntResult(0, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(vals) != 3 {
			return nil, fmt.Errorf("read.lua answered %d values, want 3", len(vals))
		}
		head, hok := vals[0].(string)
		size, sok := vals[1].(int64)
		slots, lok := vals[2].([]any)
		if !hok || !sok || !lok {
			return nil, fmt.Errorf("read.lua answered %v", vals)
		}
		ints := make([]int64, len(slots))
		for j, v := range slots {
			ints[j], _ = v.(int64)
		}
		r.head, r.size = redis.NewStringResult(head, nil), redis.NewIntResult(size, nil)
		got := redis.NewIntSliceCmd(ctx)
		got.SetVal(ints)
		r.slots = []*redis.IntSliceCmd{got}
	}
	return reads, nil
}

// A transaction holds Redis for all of its commands: the EXEC of 1,000
// items' reads (7,000 slots) took 940 us, of 9,000 items 9 ms, and a window's
// TestMany of 1,000 events at the seed's size 11.6 ms. So reads go in
// transactions of at most maxTxSlots slots (a window's: maxWindowWords
// words), each with the header check that vouches for its slots, and the
// transactions of a round trip run at once, txWorkers at a time.
const (
	maxTxSlots = 2048
	txWorkers  = 8
)

// txUnit is what one transaction must read together: a partition's header
// (or a window's ring state) and the slots of some of its items, which
// queue puts in a pipeline; slots is how many it reads.
type txUnit struct {
	p     int
	slots int
	queue func(pipe redis.Pipeliner)
}

// unitsOf splits each partition's group of items into units of at most
// size items, made by unit (a partition of the root's kind, with no item,
// gets one unit of none when always says so).
func unitsOf(groups [][]int, size int, always func(p int) bool, unit func(p int, items []int) txUnit) []txUnit {
	var units []txUnit
	for p, group := range groups {
		if len(group) == 0 {
			if always(p) {
				units = append(units, unit(p, nil))
			}
			continue
		}
		for a, z := range spans(len(group), size) {
			units = append(units, unit(p, group[a:z]))
		}
	}
	return units
}

// readAgain calls read, and again while a cluster refuses it for now (a
// slot being moved: MOVED, ASK, TRYAGAIN): reads are safe to send again.
func readAgain(ctx context.Context, read func() error) error {
	err := read()
	for wait := (backoff{}); unapplied(err); {
		if err2 := wait.next(ctx); err2 != nil {
			return fmt.Errorf("%w (the cluster kept refusing the read: %v)", err2, err)
		}
		err = read()
	}
	return err
}

// transact runs the units in transactions (MULTI, EXEC) of at most limit
// slots each, a unit never split: on a single server units of several
// partitions share one; on a cluster each holds one partition's (MULTI
// takes the keys of one hash slot). They all run at once, txWorkers at a
// time, each in its own round trip. It returns the first error.
func (f *filter) transact(ctx context.Context, units []txUnit, limit int) error {
	_, cluster := f.rdb.(*redis.ClusterClient)
	var txs [][]txUnit
	slots := 0
	for _, u := range units {
		if n := len(txs); n == 0 || slots+u.slots > limit || cluster && txs[n-1][0].p != u.p {
			txs, slots = append(txs, nil), 0
		}
		txs[len(txs)-1] = append(txs[len(txs)-1], u)
		slots += u.slots
	}
	run := func(tx []txUnit) error {
		pipe := f.rdb.TxPipeline()
		for _, u := range tx {
			u.queue(pipe)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	if len(txs) == 1 {
		return run(txs[0])
	}
	errs := make([]error, len(txs))
	sem := make(chan struct{}, txWorkers)
	var wg sync.WaitGroup
	for i, tx := range txs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = run(tx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// survey is whether each partition of a filter exists, and its length.
type survey struct {
	exists []bool
	size   []int64
	any    bool   // some partition exists: the filter does
	inc    string // the incarnation of a partition that exists
}

// survey asks every partition whether it exists, in one round trip. A
// partition that holds another filter's header fails it with that
// partition's error (ErrParamsMismatch, say): the caller's parameters are
// not the stored ones, and the partitions it finds missing may only be
// where its own parameters put them (another P names other keys).
func (f *filter) survey(ctx context.Context) (*survey, error) {
	for wait := (backoff{}); ; {
		pipe := f.rdb.Pipeline()
		exists := make([]*redis.IntCmd, len(f.parts))
		sizes := make([]*redis.IntCmd, len(f.parts))
		heads := make([]*redis.StringCmd, len(f.parts))
		for p, part := range f.parts {
			exists[p], sizes[p] = pipe.Exists(ctx, part.key), pipe.StrLen(ctx, part.key)
			heads[p] = pipe.GetRange(ctx, part.key, 0, headerSize-1)
		}
		_, err := pipe.Exec(ctx)
		if unapplied(err) {
			if err2 := wait.next(ctx); err2 != nil {
				return nil, fmt.Errorf("%w (the cluster kept refusing the read: %v)", err2, err)
			}
			continue
		}
		for p := range f.parts {
			if redis.HasErrorPrefix(sizes[p].Err(), "WRONGTYPE") {
				return nil, anotherType(f.parts[p].key)
			}
		}
		if err != nil {
			return nil, err
		}
		s := &survey{exists: make([]bool, len(f.parts)), size: make([]int64, len(f.parts))}
		for p := range f.parts {
			s.exists[p], s.size[p] = exists[p].Val() == 1, sizes[p].Val()
			s.any = s.any || s.exists[p]
			head := heads[p].Val()
			if len(head) >= identitySize && head[:identitySize] != f.parts[p].head[:identitySize] {
				return nil, f.check(p, head, s.size[p])
			}
			if len(head) == headerSize && s.inc == "" {
				s.inc = head[incByte : incByte+incSize]
			}
		}
		return s, nil
	}
}

// check compares a header and length read from partition p with f's own.
func (f *filter) check(p int, head string, size int64) error {
	want := f.parts[p]
	if head == "" {
		return failf(ErrNotFilter, "%s holds an empty string", want.key)
	}
	if len(head) < identitySize || head[:identitySize] != want.head[:identitySize] {
		h, err := parseHeader(head)
		if err != nil {
			return notFilter(want.key, err)
		}
		return failf(ErrParamsMismatch, "%s is %s, caller wants %s", want.key, h.describe(), f.h.withIndex(p).describe())
	}
	if wantSize := f.h.size(); len(head) < headerSize || size != wantSize {
		return failf(ErrDamaged, "%s is %d bytes long, want %d", want.key, size, wantSize)
	}
	if head[reservedByte:] != reservedTail {
		return failf(ErrNotFilter, "%s: reserved header bytes are not zero", want.key)
	}
	return nil
}

// test reports for each item whether all its slots are non-zero.
func (f *filter) test(ctx context.Context, items []string) ([]bool, error) {
	mins, err := f.minSlots(ctx, "test", items)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(items))
	for i, v := range mins {
		out[i] = v > 0
	}
	return out, nil
}

// count returns for each item the smallest of its slots.
func (f *filter) count(ctx context.Context, items []string) ([]int, error) {
	mins, err := f.minSlots(ctx, "count", items)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(items))
	for i, v := range mins {
		out[i] = int(v)
	}
	return out, nil
}
