package rbloom

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A restore makes a filter from a dump (dump.go) without ever showing
// half of it:
//
//  1. stage: each partition is written, as it is read, to a staging key
//     in its cluster slot ("<key>:restore:<token>", expiring 30 s after
//     its last renewal), its header marked MARK_LOAD and given a fresh
//     incarnation. The filter does not exist meanwhile (ErrNotFound). A
//     dump that turns out damaged or truncated stops here: the staging
//     keys are deleted.
//  2. install: once the whole dump has been read and checked, the
//     restore takes the name's lock (restoreLockKey), which one restore
//     of a name holds at a time from its replace to its open; then each
//     staging key is renamed to its partition's key (lua/restore.lua),
//     refused where a partition exists or a rebuild holds the lease. The
//     restore takes the partition's lease (rebuild.lua's), so that no
//     load or rebuild starts on it. Reads of an installed partition fail
//     with ErrLoading, as during a load; writes are applied to it. If one
//     install is refused, the partitions installed are deleted.
//  3. open: each partition's mark is cleared and its lease released.
//
// Install and open run with a context of their own, not the caller's:
// once an install is sent, the restore is opened, or undone (abort).
//
// The incarnation is fresh because the operation ids recorded by the
// dumped filter (or by a filter of the same name on the target) after
// the dump was taken must not be replayed on the restored one, which
// lacks their items: an id sent again is applied again (counted twice at
// worst), never answered from a record.

var (
	//go:embed lua/restore.lua
	restoreLua    string
	restoreScript = redis.NewScript(luaConstants + restoreConstants + filterLua + restoreLua)

	//go:embed lua/restoreunlock.lua
	restoreUnlockLua    string
	restoreUnlockScript = redis.NewScript(restoreUnlockLua)
)

// The replies of restore.lua and the state its lease holds.
const (
	restoreOK     = "ok"
	restoreExists = "exists"
	restoreHeld   = "held"
	restoreLost   = "lost"
	restoreState  = "R" // the lease's state: rebuild.lua's claims refuse it
)

var restoreConstants = fmt.Sprintf("local RESTORE_OK, RESTORE_EXISTS, RESTORE_HELD, RESTORE_LOST = %q, %q, %q, %q\nlocal RESTORE_STATE = %q\n",
	restoreOK, restoreExists, restoreHeld, restoreLost, restoreState)

// ErrExists is returned by Restore when a filter of that name exists (one
// of its partitions, under the handle's KeyPrefix), or was made while the
// restore ran. Nothing is left of the restore; use RestoreReplace to
// replace the filter.
var ErrExists = newKind("filter already exists")

// Restore makes the filter called name from a dump that Dump wrote, and
// returns it as Open does: a *Counting, a *Cuckoo or a *Classic, with the
// dump's parameters and items. The target may be another server (Redis
// 7.0 to 8, Valkey), a cluster, or the same server under another name or
// KeyPrefix. o gives the handle's settings, as for Open; TTL, when set,
// is given to the restored keys. The fields stored with the filter must
// be zero, but for Partitions, which may state the dump's own: a Bloom
// filter cannot be restored into another number of partitions, because
// an item's partition and its slots there are both functions of P (see
// docs/format.md, Hashing), and only its items could place it again: to
// change P, restore, then Resize from the source.
//
// r is read as it comes (io.ReaderFrom-style): each partition is written
// to a staging key as it is read, 8 MiB at a time, and nothing becomes
// visible until the whole dump has been read and every checksum matched.
// Then each partition is installed at once (a RENAME), marked as being
// loaded: until it is open, its reads fail with ErrLoading, never answer
// "absent" (writes meanwhile are applied). Before that, the filter does
// not exist: ErrNotFound. The installs take one round trip (one per
// master of a cluster), not one atomic step: meanwhile an item of a
// partition not yet installed, while another is, reads "may be present",
// as from a lost partition. The restored filter has a fresh
// incarnation: operation ids recorded before are not replayed on it.
//
// Two restores of one name install one after the other: the second waits
// (at most 30 s) until the first has opened its filter or given up.
// Once the install has begun, the restore runs to its end with a context
// of its own (10 s), whatever ctx: it returns nil only when the filter
// was opened, and undoes what it installed when it fails, so a deadline
// passing meanwhile neither leaves the filter loading nor reports a
// restore that was made as failed.
//
// It fails with ErrBadDump when r is not a whole, intact dump (another
// file, truncated, a byte changed), with ErrExists when a filter of that
// name exists, with ErrRebuilding when a rebuild holds a partition (or
// another restore of the name held it for 30 s), and with
// ErrInvalidOptions for bad options; in every case it leaves no key
// behind, but for staging keys and the lock of a process that died (they
// expire 30 s after their last renewal), or when Redis cannot be reached
// to undo an install (the error says so). Restore calls a script with EVALSHA and
// EVAL, also under Options.UseFunctions: it is an operator's call.
func Restore(ctx context.Context, rdb Client, name string, o Options, r io.Reader) (Filter, error) {
	f, err := restore(ctx, rdb, name, o, r, false)
	if err != nil {
		return nil, callError("restore", err)
	}
	return asFilter(f), nil
}

// RestoreReplace is Restore over a filter of the same name, if one exists:
// once the dump has been read whole and checked, it deletes that filter
// (its partitions, at the dump's number of partitions and at every one
// its stored partitions state, even damaged or loading, with a rebuild's
// copies and leases, as Drop does), then installs
// the restored partitions. Between the two, a round trip or two, the
// filter does not exist: calls of the old filter's handles fail
// (ErrNotFound, ErrDamaged) as after a Drop, and what they wrote to the
// old filter is gone. A dump that fails its checks leaves the old filter
// as it was; an install that fails after the deletion (a handle with
// CreateOnWrite or Source made the filter again in between: ErrExists,
// ErrRebuilding) leaves neither: run it again.
func RestoreReplace(ctx context.Context, rdb Client, name string, o Options, r io.Reader) (Filter, error) {
	f, err := restore(ctx, rdb, name, o, r, true)
	if err != nil {
		return nil, callError("restore", err)
	}
	return asFilter(f), nil
}

// asFilter returns f as the type of its mode.
func asFilter(f *filter) Filter {
	switch f.h.mode {
	case ModeClassic:
		return &Classic{base{f}}
	case ModeCuckoo:
		return &Cuckoo{base{f}}
	}
	return &Counting{base{f}}
}

// dumpReader reads a dump, keeping the count and the CRC of its bytes.
type dumpReader struct {
	r       io.Reader
	n       int64
	crc     hash.Hash32
	version uint32 // dumpVersion or windowDumpVersion, once header has read it
}

// full fills b from the dump.
func (d *dumpReader) full(b []byte) error {
	k, err := io.ReadFull(d.r, b)
	d.crc.Write(b[:k])
	d.n += int64(k)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return failf(ErrBadDump, "truncated: it ends after %d bytes", d.n)
	}
	if err != nil {
		return fmt.Errorf("reading the dump after %d bytes: %w", d.n, err)
	}
	return nil
}

// bad is ErrBadDump with what is wrong and where.
func (d *dumpReader) bad(format string, args ...any) error {
	return failf(ErrBadDump, "%s (at byte %d)", fmt.Sprintf(format, args...), d.n)
}

// header reads and checks the file header and returns the filter's (a
// window's: its generations'); the dump version read is d.version.
func (d *dumpReader) header() (header, error) {
	var b [dumpHeadSize]byte
	if err := d.full(b[:]); err != nil {
		return header{}, err
	}
	if string(b[:len(dumpMagic)]) != dumpMagic {
		return header{}, d.bad("it does not start with %q", dumpMagic)
	}
	d.version = binary.BigEndian.Uint32(b[8:])
	if d.version != dumpVersion && d.version != windowDumpVersion {
		return header{}, d.bad("dump version %d, this library reads versions %d and %d", d.version, dumpVersion, windowDumpVersion)
	}
	if crc32.Checksum(b[:76], castagnoli) != binary.BigEndian.Uint32(b[76:]) {
		return header{}, d.bad("the checksum of its header does not match")
	}
	h, err := parseHeader(string(b[12:76]))
	if err != nil {
		return header{}, d.bad("its filter header: %v", err)
	}
	if h.index != 0 {
		return header{}, d.bad("its filter header is of partition %d, not 0", h.index)
	}
	if h.items != 0 || b[12+markByte] != 0 || h.inc != strings.Repeat("\x00", incSize) {
		return header{}, d.bad("its filter header's items, mark or incarnation is not zero")
	}
	if !(h.errorRate >= 0 && h.errorRate < 1) { // NaN included
		return header{}, d.bad("its filter header's error rate %v is outside [0, 1)", h.errorRate)
	}
	h.inc = ""
	return h, nil
}

// section reads and checks the head of partition p's section and returns
// the partition's item count and n, the bytes that follow: want, or 0
// where none is allowed (a window partition without a ring).
func (d *dumpReader) section(p int, want int64, none bool) (items, n int64, err error) {
	var b [sectionSize]byte
	if err := d.full(b[:]); err != nil {
		return 0, 0, err
	}
	n = int64(binary.BigEndian.Uint64(b[16:]))
	switch {
	case string(b[:4]) != sectionMagic:
		return 0, 0, d.bad("partition %d's section does not start with %q", p, sectionMagic)
	case crc32.Checksum(b[:24], castagnoli) != binary.BigEndian.Uint32(b[24:]):
		return 0, 0, d.bad("the checksum of partition %d's section head does not match", p)
	case binary.BigEndian.Uint32(b[4:]) != uint32(p):
		return 0, 0, d.bad("section of partition %d where %d was due", binary.BigEndian.Uint32(b[4:]), p)
	case n != want && !(none && n == 0):
		return 0, 0, d.bad("partition %d holds %d bytes of slots, its header says %d", p, n, want)
	}
	items = int64(binary.BigEndian.Uint64(b[8:]))
	if items < 0 || items >= maxPartitionItems {
		return 0, 0, d.bad("partition %d holds %d items, outside 0..2^53-1", p, items)
	}
	return items, n, nil
}

// maxPartitionItems bounds a restored partition's item count: the sum of
// MaxPartitions of them stays below 2^63 (Info.Items), and Lua's numbers
// hold each exactly.
const maxPartitionItems = 1 << 53

// trailer reads and checks the end of a dump of p partitions, and that
// nothing follows it.
func (d *dumpReader) trailer(p int) error {
	var b [trailerSize]byte
	before := d.n
	if err := d.full(b[:16]); err != nil {
		return err
	}
	sum := d.crc.Sum32()
	if err := d.full(b[16:]); err != nil {
		return err
	}
	switch {
	case string(b[:4]) != trailerMagic:
		return d.bad("no %q after the last partition", trailerMagic)
	case binary.BigEndian.Uint32(b[4:]) != uint32(p) || int64(binary.BigEndian.Uint64(b[8:])) != before:
		return d.bad("its end states %d partitions in %d bytes, it holds %d in %d",
			binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint64(b[8:]), p, before)
	case binary.BigEndian.Uint32(b[16:]) != sum:
		return d.bad("the checksum of the whole dump does not match")
	}
	var one [1]byte
	if k, _ := io.ReadFull(d.r, one[:]); k > 0 {
		return d.bad("bytes follow its end")
	}
	return nil
}

// stagingKey is the key a restore writes the partition at key to.
func stagingKey(key, token string) string { return key + ":restore:" + token }

// restorer runs one restore.
type restorer struct {
	f     *filter
	token string
	inc   string // the restored filter's incarnation
	heads []string
	// replace deletes what a restore over the name replaces, once it
	// holds the lock (filter.replace, Window.drop).
	replace func(context.Context) error

	// w is the window restored (window_dump.go); nil for a filter. Its
	// partitions are rings, with settings; sizes[p] is the length of
	// partition p's ring, 0 for none, and ringAt[p] the time its ring
	// expires, read at the install.
	w      *Window
	sizes  []int64
	ringAt []int64

	locked bool // whether it holds the name's restore lock

	mu     sync.Mutex
	staged []string // staging keys written so far, renewed until the end
}

func restore(ctx context.Context, rdb Client, name string, o Options, r io.Reader, replace bool) (*filter, error) {
	if o.Capacity != 0 || o.ErrorRate != 0 || o.Slots != 0 || o.Hashes != 0 || o.IDLifetime != 0 {
		return nil, failf(ErrInvalidOptions, "Capacity, ErrorRate, Slots, Hashes and IDLifetime come from the dump: leave them zero")
	}
	if err := o.checkHandleOf(rdb, name); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, failf(ErrInvalidOptions, "nil reader")
	}
	d := &dumpReader{r: r, crc: crc32.New(castagnoli)}
	h, err := d.header()
	if err != nil {
		return nil, err
	}
	if d.version == windowDumpVersion {
		return nil, d.bad("it is a window's dump: RestoreWindow (rbloom restore) restores it")
	}
	if o.Partitions != 0 && o.Partitions != int(h.partitions) {
		return nil, failf(ErrInvalidOptions, "Partitions = %d: the dump has %d partitions, and a Bloom filter's slots cannot be moved to another number of them (an item's partition and its slots there are both functions of P: only its items could place it again); restore with %d, then Resize from the source",
			o.Partitions, h.partitions, h.partitions)
	}
	o.Partitions = 0
	f, err := o.handle(rdb, name, h)
	if err != nil {
		return nil, err
	}
	if err := f.checkServer(ctx); err != nil {
		return nil, err
	}
	if !replace {
		s, err := f.survey(ctx)
		if errors.Is(err, ErrParamsMismatch) {
			return nil, failf(ErrExists, "%s: another filter of that name exists (%v); RestoreReplace, or rbloom restore --replace, replaces it", name, errText(err))
		}
		if err != nil {
			return nil, err
		}
		if s.any {
			return nil, failf(ErrExists, "%s: %s exists (RestoreReplace, or rbloom restore --replace, replaces it)", name, f.parts[0].key)
		}
	}
	rs := &restorer{f: f, token: newToken(), inc: randomIncarnation(), replace: f.replace}
	if err := rs.run(ctx, d, replace); err != nil {
		return nil, err
	}
	// Its incarnation is the filter's now: a load after a loss keeps it
	// (incarnation.go). The restore stands without it.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreFinishTimeout)
	defer cancel()
	_ = f.keepIncarnation(kctx, rs.inc)
	return f, nil
}

// run stages the dump read by d, whose file header has been read, and,
// once the whole dump has been read and checked, takes the name's lock,
// deletes what it replaces (when replace), and installs and opens it;
// or undoes what it wrote.
func (rs *restorer) run(ctx context.Context, d *dumpReader, replace bool) error {
	f := rs.f
	stop := rs.renew(ctx)
	err := rs.stage(ctx, d)
	if err == nil {
		err = d.trailer(len(f.parts))
	}
	if err == nil {
		err = rs.lock(ctx)
	}
	defer rs.unlock(ctx)
	if err == nil && replace {
		err = rs.replace(ctx)
	}
	stop()
	if err != nil {
		return rs.abort(ctx, err, false)
	}
	// Once an install is sent, the restore is completed or undone
	// whatever the caller's context: a deadline must not leave the
	// filter installed and loading, nor report as failed a restore
	// that was opened.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreFinishTimeout)
	defer cancel()
	if rs.w != nil {
		err = rs.ringExpiries(fctx)
	}
	if err == nil {
		err = rs.step(fctx, "install")
	}
	if err == nil {
		err = rs.step(fctx, "open")
	}
	if err != nil {
		return rs.abort(ctx, err, true)
	}
	return nil
}

// restoreFinishTimeout bounds a restore's install and open, and the undo
// of a failed restore, which run whatever the caller's context.
const restoreFinishTimeout = 10 * time.Second

// restoreLockKey is the key that one restore of the filter name holds
// from its deletion of the filter it replaces to its open, so that two
// restores of one name, of different numbers of partitions, do not
// install into each other's keys.
func restoreLockKey(prefix, name string) string { return keyOf(prefix, name) + ":restoring" }

// lock takes the name's restore lock, waiting while another restore holds
// it (its install and open take a few round trips), for at most
// dumpKeyLife, after which the lock of a process that died has expired.
func (rs *restorer) lock(ctx context.Context) error {
	f := rs.f
	key := restoreLockKey(f.prefix, f.name)
	start, pause := time.Now(), 2*time.Millisecond
	for {
		pipe := f.rdb.Pipeline()
		set := pipe.SetNX(ctx, key, rs.token, dumpKeyLife)
		_, err := pipe.Exec(ctx)
		ok := set.Val()
		if err != nil {
			return fmt.Errorf("taking %s: %w", key, err)
		}
		if ok {
			rs.locked = true
			return nil
		}
		if time.Since(start) > dumpKeyLife {
			return failf(ErrRebuilding, "%s: another restore of the filter held %s for %v", f.name, key, dumpKeyLife)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// unlock releases the name's restore lock if this restore holds it; a
// lock it could not release expires.
func (rs *restorer) unlock(ctx context.Context) {
	if !rs.locked {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreFinishTimeout)
	defer cancel()
	call := scriptCall{keys: []string{restoreLockKey(rs.f.prefix, rs.f.name)}, args: []any{rs.token}}
	_, _ = runScripts(ctx, rs.f.rdb, restoreUnlockScript, false, []scriptCall{call}, replication{})
}

// stage writes every partition of the dump to its staging key.
func (rs *restorer) stage(ctx context.Context, d *dumpReader) error {
	f := rs.f
	bufs := make([][]byte, dumpRoundTrip)
	for i := range bufs {
		bufs[i] = make([]byte, dumpChunk)
	}
	for p, part := range f.parts {
		items, n, err := d.section(p, rs.size(p)-headerSize, rs.w != nil)
		if err != nil {
			return err
		}
		head := []byte(withIncarnation(part.head, rs.inc))
		binary.BigEndian.PutUint64(head[itemsByte:], uint64(items))
		head[markByte] = markLoad
		rs.heads = append(rs.heads, string(head))
		if rs.w != nil {
			rs.sizes = append(rs.sizes, min(n, 1)*rs.size(p)) // 0: no ring
		}
		if n == 0 {
			if err := d.sectionEnd(p, crc32.New(castagnoli)); err != nil {
				return err
			}
			continue
		}
		key := rs.key(p)
		staging := stagingKey(key, rs.token)
		rs.mu.Lock()
		rs.staged = append(rs.staged, staging)
		rs.mu.Unlock()
		pipe := f.rdb.Pipeline()
		pipe.Set(ctx, staging, head, dumpKeyLife)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("%s: staging it at %s: %w", key, staging, err)
		}
		crc := crc32.New(castagnoli)
		for off := int64(0); off < n; {
			var chunks [][]byte
			at := headerSize + off
			for i := 0; i < dumpRoundTrip && off < n; i++ {
				b := bufs[i][:min(dumpChunk, n-off)]
				if err := d.full(b); err != nil {
					return err
				}
				if off == 0 && rs.w != nil {
					// The ring's state, checked as window.lua checks it:
					// a dump whose checksums a forger made right must
					// not install a ring no call can use.
					if err := rs.w.checkDumpedState(p, string(head)+string(b)); err != nil {
						return d.bad("partition %d: %v", p, err)
					}
				}
				crc.Write(b)
				chunks = append(chunks, b)
				off += int64(len(b))
			}
			// The string grows with the bytes read, once per round
			// trip: a short forged dump that declares a big partition
			// makes Redis allocate about its own length, not the
			// partition's.
			pipe := f.rdb.Pipeline()
			pipe.SetRange(ctx, staging, headerSize+off-1, "\x00")
			for _, b := range chunks {
				pipe.Do(ctx, "SETRANGE", staging, at, b) // SetRange would copy b to a string
				at += int64(len(b))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("%s: staging it at %s: %w", key, staging, err)
			}
		}
		if err := d.sectionEnd(p, crc); err != nil {
			return err
		}
	}
	return nil
}

// sectionEnd reads the checksum that ends partition p's section and
// compares it with crc, that of the bytes read.
func (d *dumpReader) sectionEnd(p int, crc hash.Hash32) error {
	sum := crc.Sum32()
	var b [4]byte
	if err := d.full(b[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(b[:]) != sum {
		return d.bad("the checksum of partition %d's slots does not match", p)
	}
	return nil
}

// key is the key that partition p is restored to: the filter's
// partition, or the window's ring.
func (rs *restorer) key(p int) string {
	if rs.w != nil {
		return rs.w.ringKey(p)
	}
	return rs.f.parts[p].key
}

// size is the length of the string restored to partition p's key.
func (rs *restorer) size(p int) int64 {
	if rs.w != nil {
		return rs.w.r.size
	}
	return rs.f.h.size()
}

// renew renews the staging keys every third of their life until the
// returned function is called.
func (rs *restorer) renew(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, dumpKeyLife/3, func() bool {
			rs.mu.Lock()
			keys := append([]string(nil), rs.staged...)
			rs.mu.Unlock()
			pipe := rs.f.rdb.Pipeline()
			for _, k := range keys {
				pipe.PExpire(ctx, k, dumpKeyLife)
			}
			_, _ = pipe.Exec(ctx) // a key lost is found lost by its install
			return false
		})
	}()
	return func() { cancel(); <-done }
}

// replace deletes the filter called f.name, at f's number of partitions
// and at the ones its stored partitions state, as Drop does.
func (f *filter) replace(ctx context.Context) error {
	keys := map[string]bool{}
	for _, p := range f.parts {
		keys[p.key] = true
	}
	stored, err := storedPartitions(ctx, f.rdb, f.prefix, f.name)
	if err != nil {
		return fmt.Errorf("reading the filter it replaces: %w", err)
	}
	for _, p := range stored {
		for _, key := range partitionKeys(f.prefix, f.name, p) {
			keys[key] = true
		}
	}
	pipe := f.rdb.Pipeline() // one DEL per slot
	for key := range keys {
		pipe.Del(ctx, key, copyKey(key), leaseKey(key))
	}
	pipe.Del(ctx, resizedKey(f.prefix, f.name), incarnationKey(f.prefix, f.name))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deleting the filter it replaces: %w", err)
	}
	return nil
}

// step runs restore.lua's step on every partition, in one round trip
// (a window's in two: its root's install first and its open last, so
// that the root's ring, which every read of the window reads, refuses
// them while the others are not all open), and turns the first refusal
// into its error.
func (rs *restorer) step(ctx context.Context, step string) error {
	var first, then []int
	for p := range rs.f.parts {
		if rs.w != nil && step != "abort" && p == rs.w.root {
			then = append(then, p)
		} else {
			first = append(first, p)
		}
	}
	if step == "install" {
		first, then = then, first
	}
	for _, ps := range [][]int{first, then} {
		if len(ps) > 0 {
			if err := rs.stepOn(ctx, step, ps); err != nil {
				return err
			}
		}
	}
	return nil
}

// stepOn is step on the partitions ps only.
func (rs *restorer) stepOn(ctx context.Context, step string, ps []int) error {
	f := rs.f
	lease := strconv.FormatInt(rebuildLease.Milliseconds(), 10)
	ttl := strconv.FormatInt(f.ttl.Milliseconds(), 10)
	calls := make([]scriptCall, len(ps))
	for i, p := range ps {
		key := rs.key(p)
		calls[i] = scriptCall{
			keys: []string{key, stagingKey(key, rs.token), leaseKey(key)},
			args: []any{rs.heads[p], step, rs.token, lease, ttl},
		}
		if rs.w != nil {
			calls[i] = rs.w.restoreCall(calls[i], p, rs.sizes[p], rs.ringAt)
		}
	}
	replies, err := runScripts(ctx, f.rdb, restoreScript, false, calls, f.repl)
	if err != nil {
		return fmt.Errorf("%s: %w", step, scriptError(err))
	}
	var refused []string
	first := ""
	for i, reply := range replies {
		if reply != restoreOK {
			refused = append(refused, rs.key(ps[i]))
			first = cmp.Or(first, reply)
		}
	}
	if refused == nil {
		return nil
	}
	keys := strings.Join(refused, ", ")
	switch first {
	case restoreExists:
		return failf(ErrExists, "%s: %s exists: made while the restore ran", f.name, keys)
	case restoreHeld:
		return failf(ErrRebuilding, "%s: a rebuild, a load or another restore holds %s", f.name, keys)
	}
	return failf(ErrRebuildLost, "%s: %s: %s (its staging key expired, or the filter was dropped or made while the restore ran)", f.name, step, keys)
}

// abort deletes what the restore wrote, where it still holds it or where
// it opened a partition, whatever ctx, and returns err, with abort's own
// failure if any, or, once an install was sent, that it was undone.
func (rs *restorer) abort(ctx context.Context, err error, installing bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreFinishTimeout)
	defer cancel()
	for len(rs.heads) < len(rs.f.parts) {
		rs.heads = append(rs.heads, withIncarnation(rs.f.parts[len(rs.heads)].head, rs.inc)) // never staged
	}
	if rs.w != nil {
		for len(rs.sizes) < len(rs.f.parts) {
			rs.sizes = append(rs.sizes, rs.size(len(rs.sizes)))
		}
	}
	for p := range rs.heads {
		h := []byte(rs.heads[p])
		h[markByte] = markLoad
		rs.heads[p] = string(h)
	}
	if abortErr := rs.step(ctx, "abort"); abortErr != nil {
		return fmt.Errorf("%w; and then deleting what the restore wrote: %w (partitions it installed may be left, loading or open: RestoreReplace or Drop removes them)", err, abortErr)
	}
	if installing {
		return fmt.Errorf("%w (the restore was undone: none of its partitions is left)", err)
	}
	return err
}

// storedPartitions returns the numbers of partitions that the stored
// partitions of the filter name state: its root's and, as Open reads them
// when the root is lost, its witnesses' (witnessKeys). Unlike Open, it
// reads a filter that is damaged, loading or half restored.
func storedPartitions(ctx context.Context, rdb Client, prefix, name string) ([]int, error) {
	keys := append([]string{keyOf(prefix, name)}, witnessKeys(prefix, name)...)
	pipe := rdb.Pipeline()
	heads := make([]*redis.StringCmd, len(keys))
	for i, key := range keys {
		heads[i] = pipe.GetRange(ctx, key, 0, headerSize-1)
	}
	_, _ = pipe.Exec(ctx) // per command: a key of another type fails alone
	var ps []int
	for i, head := range heads {
		if err := head.Err(); err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, err
		}
		h, err := parseHeader(head.Val())
		if err != nil || h.partitions < 1 || int(h.index) >= int(h.partitions) {
			continue
		}
		if p := int(h.partitions); partitionKeys(prefix, name, p)[h.index] == keys[i] && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps, nil
}
