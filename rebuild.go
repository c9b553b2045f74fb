package rbloom

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A rebuild refills a filter from its source of truth without stopping it.
// Each partition gets a copy in its cluster slot (its key followed by
// ":next") and a lease (":rebuild") that names the rebuild holding it.
//
//  1. claim: on every partition, at once, a fresh empty copy, the
//     partition's header marked, the lease taken. From then on every add,
//     from any process, is applied to the partition and to its copy in the
//     same script. A partition another rebuild holds refuses the claim.
//  2. fill: the caller's fill adds the source's items to the copies; a
//     background renewal keeps the lease.
//  3. switch: each copy replaces its partition with one RENAME, keeping the
//     partition's TTL, if and only if the lease is still this rebuild's
//     and the partition is as the claim left it. An item's partition
//     switches at once from the old counters to the new ones.
//
// Removes are never applied to a copy. The copy holds what the fill read
// from the source and the adds made since the claim, and a remove's item
// may be in neither (its row was deleted before the fill read the table):
// decrementing it there, where it may test present as a false positive,
// would take counts of items that are held. Items removed while a rebuild
// runs may therefore remain in the new counters as ghosts, until the next
// rebuild: at most as many as such removes, never a false negative.
//
// What the fill must do for that to hold (stated on Counting.Rebuild):
// read the source after Rebuild has called it, in one consistent snapshot
// taken at a moment when no change of the application is half done: every
// item whose Add has returned is in the source (or its row was given up),
// and every item deleted from the source has had its Remove called (it
// may still be running; only a Remove that starts after the switch for a
// row the snapshot did not hold would take counts of others).

// rebuildLease is how long a rebuild holds a filter without renewing its
// lease; it renews every third of it.
const rebuildLease = 30 * time.Second

// A resize rebuilds the filter into another size: another m, k or P, so
// other keys and other slots for each item. Its copies are those of the
// new filter's partitions ("prepare"), and the old partitions are marked
// MARK_RESIZE ("mark"), which makes add.lua send each add back to the
// client with the new filter's header (kept at the copy key of each old
// partition): the client adds the items to the new filter's copies, then
// to the old partition (write.go). An item is in the new copies before it
// is in the old counters, so nothing the old counters hold is missing from
// the new ones at the switch. The switch checks every key first, then
// deletes the old partitions the new filter does not reuse ("retire"),
// then renames each copy into place. From the first deletion on, a handle
// of the old size gets an error, never an answer from counters the new
// filter's writers no longer update: a retired partition reads as lost
// (its items "may be present", its writes ErrDamaged) until a key shows
// the new header, which is ErrParamsMismatch, telling it to reopen.

// rebuild fills fresh copies of f with the items fill adds, then puts them
// in its place.
func (f *filter) rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	return f.rebuildInto(ctx, f, fill, nil)
}

// rebuildInto rebuilds f into g: f itself, or f at another size. claimed,
// when not nil, is called once the filter is held (every add reaches the
// new slots), before fill.
func (f *filter) rebuildInto(ctx context.Context, g *filter, fill func(add func(items []string) error) error, claimed func()) error {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand documents it)
	r := rebuilder{f: f, g: g, token: hex.EncodeToString(b[:]), resize: g.parts[0].head[:identitySize] != f.parts[0].head[:identitySize]}
	// The claim makes the partitions that are missing (all of them, for a
	// filter that does not exist), marked as being loaded: writes reach
	// them from then on, and reads of them fail with ErrLoading until
	// the switch. A resize needs a filter to resize.
	s, err := f.survey(ctx)
	if err == nil && !s.any && r.resize {
		err = f.notFound()
	}
	if err != nil {
		return err
	}
	// A partition made by the rebuild (one that was lost, or one of a
	// resize) gets the filter's incarnation, so that the operation ids it
	// recorded before are still found there.
	r.inc = s.inc
	if r.inc == "" {
		// A load: the incarnation the filter had, if it is kept, so
		// that its operation records still answer (incarnation.go).
		if r.inc, err = f.keptIncarnation(ctx); err != nil {
			return err
		}
	}
	// A partition the claim makes expires with the filter: with the TTL
	// left to the others when some exist, else with the handle's.
	r.ttl = f.ttlMS
	if s.any {
		if r.ttl, err = f.ttlLeft(ctx); err != nil {
			return err
		}
	}
	if err := r.start(ctx); err != nil {
		return r.abort(ctx, err)
	}
	if claimed != nil {
		claimed()
	}
	next := *g // the filter being built, at the keys of the copies
	next.parts = nil
	for _, p := range g.parts {
		next.parts = append(next.parts, part{key: copyKey(p.key), head: p.head})
	}
	fillCtx, cancel := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		r.renew(fillCtx, cancel)
	}()
	defer func() {
		// A fill that panics must not leave its lease renewed for as
		// long as the process lives, holding the filter for good.
		if p := recover(); p != nil {
			cancel(nil)
			<-renewed
			_ = r.abort(ctx, errors.New("the fill panicked"))
			panic(p)
		}
	}()
	err = fill(func(items []string) error { return next.fill(fillCtx, items) })
	if err != nil {
		err = fmt.Errorf("fill: %w", err)
	}
	if cause := context.Cause(fillCtx); errors.Is(cause, ErrRebuildLost) {
		err = cause // the fill's error, if any, followed from it
	}
	cancel(nil)
	<-renewed
	if err == nil {
		err = r.finish(ctx)
	}
	if err != nil {
		// Partitions that switched are done: their lease says so, and
		// abort leaves them alone.
		return r.abort(ctx, err)
	}
	// The leases stayed, marked switched, so that a switch re-sent by
	// go-redis after a lost reply is answered ok; now they can go.
	_ = r.step(ctx, "release", r.all(), false)
	if !s.any {
		// A load that finished: its incarnation is the filter's now.
		_ = f.keepIncarnation(ctx, r.inc)
	}
	return nil
}

// fill adds items to f, a filter at the keys of a rebuild's copies, which
// it never creates: a missing copy means the rebuild was interrupted.
func (f *filter) fill(ctx context.Context, items []string) error {
	op := f.addOp()
	op.create, op.fill = false, true
	_, err := f.write(ctx, op, items)
	return err
}

// rebuilder runs the steps of one rebuild of f into g.
type rebuilder struct {
	f, g   *filter
	token  string // names this rebuild in the leases
	resize bool   // g has another size than f
	inc    string // the incarnation of the partitions it makes
	ttl    string // the TTL in ms of the partitions its claim makes
}

// site is a key a step runs on: the header the key is checked against,
// and for "mark", the new header kept at the copy key of a retired one.
type site struct {
	key, head, target string
}

// start claims f (a rebuild), or prepares g and marks f (a resize).
func (r rebuilder) start(ctx context.Context) error {
	if !r.resize {
		return r.step(ctx, "claim", r.old(), true)
	}
	if err := r.step(ctx, "prepare", r.new(), true); err != nil {
		return err
	}
	return r.step(ctx, "mark", r.old(), false)
}

// finish switches f to the copies: every key checked, then (a resize) the
// retired partitions deleted, then each copy renamed into place.
func (r rebuilder) finish(ctx context.Context) error {
	if !r.resize {
		return r.step(ctx, "switch", r.old(), false)
	}
	if err := r.step(ctx, "check", r.all(), false); err != nil {
		return err
	}
	if err := r.f.recordResize(ctx, r.g); err != nil {
		return fmt.Errorf("recording the resize for the other handles: %w", err)
	}
	if err := r.step(ctx, "retire", r.retired(), false); err != nil {
		return err
	}
	return r.step(ctx, "switch", r.new(), false)
}

// old returns f's partitions; for a resize, those g reuses carry no target.
func (r rebuilder) old() []site {
	reused := map[string]bool{}
	for _, p := range r.g.parts {
		reused[p.key] = true
	}
	var out []site
	for _, p := range r.f.parts {
		s := site{key: p.key, head: p.head}
		if r.resize && !reused[p.key] {
			s.target = r.g.parts[0].head
		}
		out = append(out, s)
	}
	return out
}

// new returns g's partitions.
func (r rebuilder) new() []site {
	var out []site
	for _, p := range r.g.parts {
		out = append(out, site{key: p.key, head: p.head})
	}
	return out
}

// retired returns f's partitions that g does not reuse.
func (r rebuilder) retired() []site {
	var out []site
	for _, s := range r.old() {
		if s.target != "" {
			out = append(out, site{key: s.key, head: s.head})
		}
	}
	return out
}

// all returns every key of the rebuild once: g's, then those retired.
func (r rebuilder) all() []site {
	if !r.resize {
		return r.old()
	}
	return append(r.new(), r.retired()...)
}

// step runs rebuild.lua's step on the sites, in one round trip, and waits
// for the replicas as every write of f does. withInc gives each site's
// header the rebuild's incarnation, the one a partition made from it gets.
func (r rebuilder) step(ctx context.Context, step string, sites []site, withInc bool) error {
	f := r.f
	lease := strconv.FormatInt(rebuildLease.Milliseconds(), 10)
	ttl := r.ttl
	if step == "switch" {
		// A partition that did not exist (a lost one, or a new one of a
		// resize) takes the TTL left to the filter's others, not the
		// rebuilding handle's; the switch keeps their own to the others.
		var err error
		if ttl, err = f.ttlLeft(ctx); err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
	}
	calls := make([]scriptCall, len(sites))
	for i, s := range sites {
		head := s.head
		if withInc {
			head = withIncarnation(head, r.inc)
		}
		calls[i] = scriptCall{
			keys: []string{s.key, copyKey(s.key), leaseKey(s.key)},
			args: []any{head, step, r.token, lease, ttl, s.target},
		}
	}
	if _, err := runScripts(ctx, f.rdb, rebuildScript, f.fcall, calls, f.repl); err != nil {
		return fmt.Errorf("%s: %w", step, scriptError(err))
	}
	return nil
}

// ttlLeft returns, in ms as rebuild.lua takes it, the shortest TTL left
// to a partition of f, "0" when none has one.
func (f *filter) ttlLeft(ctx context.Context) (string, error) {
	pipe := f.rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(f.parts))
	for p, part := range f.parts {
		ttls[p] = pipe.PTTL(ctx, part.key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return "", err
	}
	var least time.Duration
	for _, c := range ttls {
		if d := c.Val(); d > 0 && (least == 0 || d < least) {
			least = d
		}
	}
	return strconv.FormatInt(least.Milliseconds(), 10), nil
}

// renew renews the leases until ctx is done, every third of the lease. A
// lease found lost ends the fill, through cancel; other failures are
// tried again at the next turn (the switch checks the leases anyway).
func (r rebuilder) renew(ctx context.Context, cancel context.CancelCauseFunc) {
	every(ctx, rebuildLease/3, func() bool {
		err := r.step(ctx, "renew", r.all(), false)
		if errors.Is(err, ErrRebuildLost) {
			cancel(err)
			return true
		}
		return false
	})
}

// abort undoes the claim after err, where this rebuild still holds it,
// and returns err, with abort's own failure if any.
func (r rebuilder) abort(ctx context.Context, err error) error {
	if abortErr := r.step(context.WithoutCancel(ctx), "abort", r.all(), false); abortErr != nil {
		return fmt.Errorf("%w; and then %w", err, abortErr)
	}
	return err
}

// resized returns a handle like f's of the filter at the size o gives:
// o's stored fields, as NewCounting reads them (IDLifetime must be 0 or
// f's: the id lifetime names the hashes of the records).
func (f *filter) resized(o Options) (*filter, error) {
	h, err := o.resolve(f.h.mode)
	if err != nil {
		return nil, err
	}
	switch {
	case o.IDLifetime == 0:
		h.once = f.h.once
	case h.onceSeconds() != f.h.onceSeconds():
		// The records of operation ids are kept in hashes named by the id
		// lifetime: the resized filter would not find those made before,
		// and ids sent again would be applied again.
		return nil, failf(ErrInvalidOptions, "IDLifetime = %v: a resize keeps the filter's id lifetime (leave it 0)", o.IDLifetime)
	}
	return f.withHeader(h), nil
}

// Resize rebuilds the filter at the size o gives (its Capacity and
// ErrorRate, or Slots and Hashes, and Partitions, as NewCounting reads
// them; IDLifetime 0 or the filter's, which a resize keeps), without
// stopping it, and returns a handle of the resized filter with c's
// settings. Use it when Info says the filter is overfull. fill follows the
// rule of Rebuild.
//
// While the new filter is filled, every process keeps reading the old one,
// and its adds go to both: a handle of the old size learns the new size
// from Redis on its first add. Then the new partitions take the old ones'
// place. From then on c, and every handle of the old size, follow: a call
// that finds the filter switched under it reads the new size from Redis
// (a record the resize leaves for 7 days) and goes on with it, its reads
// sent again and its writes for the items not applied (a Once call, only
// when none of its calls applied: see below). No handle, of either size,
// ever answers "absent" for an item held.
//
// Operation ids are remembered by partition key. A resize that keeps the
// number of partitions keeps every item in a partition of the same key,
// and the ids recorded there are still honoured, but refused with
// ErrOpIDReused when k changes (a batch is then cut into other calls);
// with another number of partitions, an AddOnce or RemoveOnce applied
// before the switch and sent again after it may be applied again, and so
// may an add that failed with ErrParamsMismatch at the switch, the rare
// case the client cannot record itself (see docs/guarantees.md, "What it
// cannot promise"). The errors are those of Rebuild.
func (c *Counting) Resize(ctx context.Context, o Options, fill func(add func(items []string) error) error) (*Counting, error) {
	g, err := c.resize(ctx, o, fill)
	if err != nil {
		return nil, err
	}
	return &Counting{base{g}}, nil
}

// Resize rebuilds the filter at the size o gives, as Counting.Resize does.
func (c *Classic) Resize(ctx context.Context, o Options, fill func(add func(items []string) error) error) (*Classic, error) {
	g, err := c.resize(ctx, o, fill)
	if err != nil {
		return nil, err
	}
	return &Classic{base{g}}, nil
}

// resize is Resize for either type: the handle of the resized filter.
func (b *base) resize(ctx context.Context, o Options, fill func(add func(items []string) error) error) (*filter, error) {
	f := b.f.current()
	g, err := f.resized(o)
	if err == nil {
		err = f.rebuildInto(ctx, g, fill, nil)
	}
	if err != nil {
		return nil, callError("resize", err)
	}
	return g, nil
}
