package rbloom

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A window's dump is a filter's (dump.go, restore.go) of version
// windowDumpVersion: the file header holds the generations' 64-byte
// header; a block follows it,
//
//	window block   "WIND", L (uint32), the L bytes of the settings'
//	               text after their header (";ring;bucket=<B>ms;
//	               span=<S>ms;blocks=1024x3", as field 's' of the
//	               settings hash holds it), CRC of those 8 + L bytes
//
// then a section per partition holds its ring after the header (the
// state block and the words, as stored: the generations keep their
// absolute buckets), or n = 0 when the partition had no ring (it had
// expired, or none was made yet). A restore stages and installs the rings
// as a filter's partitions, the root's first, each marked MARK_LOAD and
// without its settings, so that every read and call of the window fails
// until the open writes the settings, the root's last (lua/restore.lua).

// windowBlockMagic starts a window dump's block.
const windowBlockMagic = "WIND"

// maxWindowSuffix bounds the settings' text a dump's block holds.
const maxWindowSuffix = 256

// Dump writes the window to w in rbloom's dump format (docs/format.md,
// "Dumps"), which RestoreWindow reads into any server rbloom runs on,
// under any KeyPrefix, on a cluster or not. It returns the bytes written.
// The window keeps serving.
//
// Each partition's ring is read from a snapshot, as Counting.Dump reads a
// partition: its every generation as it was at one moment, whatever
// writers do; the partitions are taken one after the other, not at one
// moment together: an event added while Dump runs may be in the dump or
// not, and every event whose TestOrAdd returned before Dump was called,
// still within the span, is in it. The generations keep their buckets
// (the clock's, not the dump's): restored later, those that have left the
// span by then are cleared as window.lua clears them, and the others
// answer as they would have.
//
// It fails with ErrNotFound when the window does not exist, ErrLoading
// while it is being restored, ErrDamaged when a ring was lost or is
// damaged (as every call of the window does), and ErrParamsMismatch when
// the stored settings are not this handle's. What was written to w before
// an error is not a dump: RestoreWindow refuses it.
func (w *Window) Dump(ctx context.Context, wr io.Writer) (int64, error) {
	return observe(ctx, w.f.obs, w.callOf("Dump", 0), func(ctx context.Context) (int64, error) {
		n, err := w.dump(ctx, wr)
		return n, callError("window dump", err)
	})
}

// DumpWindow is Window.Dump of the window called name, whose settings
// it reads from Redis: o gives the handle's settings (KeyPrefix,
// UseFunctions, WaitReplicas, WaitTimeout, Observer); the others must be
// zero. It fails with ErrNotFound when the window's root settings are
// missing.
func DumpWindow(ctx context.Context, rdb Client, name string, o WindowOptions, wr io.Writer) (int64, error) {
	w, err := storedWindow(ctx, rdb, name, o)
	if err != nil {
		return 0, callError("window dump", err)
	}
	return w.Dump(ctx, wr)
}

// storedWindow returns the handle of the window called name that its root
// settings describe, with o's handle settings.
func storedWindow(ctx context.Context, rdb Client, name string, o WindowOptions) (*Window, error) {
	if err := o.onlyHandle(); err != nil {
		return nil, err
	}
	if rdb == nil {
		return nil, failf(ErrInvalidOptions, "nil Redis client")
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	key := keyOf(o.prefix(), name) + ":window"
	pipe := rdb.Pipeline()
	s := pipe.HGet(ctx, key, "s")
	if err := execAll(ctx, pipe); err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, anotherType(key)
		}
		return nil, err
	}
	if s.Err() == redis.Nil {
		return nil, failf(ErrNotFound, "%s: no window of that name (%s holds no settings)", name, key)
	}
	head, suffix := s.Val()[:min(len(s.Val()), headerSize)], s.Val()[min(len(s.Val()), headerSize):]
	h, err := parseHeader(head)
	if err != nil {
		return nil, notFilter(key, err)
	}
	return windowOf(rdb, name, o, h, suffix)
}

// onlyHandle refuses the fields of o that a dump or the stored settings
// give.
func (o WindowOptions) onlyHandle() error {
	if o.EventsPerBucket != 0 || o.ErrorRate != 0 || o.Bucket != 0 || o.Span != 0 || o.IDLifetime != 0 {
		return failf(ErrInvalidOptions, "EventsPerBucket, ErrorRate, Bucket, Span and IDLifetime come from the window: leave them zero")
	}
	return nil
}

// prefix is the KeyPrefix of o's keys.
func (o WindowOptions) prefix() string {
	if o.KeyPrefix == "" {
		return DefaultKeyPrefix
	}
	return o.KeyPrefix
}

// windowOf returns the handle, with o's handle settings, of the window
// called name whose generations' header is h (partition 0's, or the
// root's) and whose settings' text after the header is suffix. The
// handle's own settings must give both again: a window whose sizing or
// event placement this version of rbloom makes otherwise is refused.
func windowOf(rdb Client, name string, o WindowOptions, h header, suffix string) (*Window, error) {
	var bucketMS, spanMS int64
	if _, err := fmt.Sscanf(suffix, ";ring;bucket=%dms;span=%dms;", &bucketMS, &spanMS); err != nil || h.mode != ModeClassic {
		return nil, failf(ErrNotFilter, "%s: not the settings of a window (%q)", name, suffix)
	}
	if o.Partitions != 0 && o.Partitions != int(h.partitions) {
		return nil, failf(ErrInvalidOptions, "Partitions = %d: the window has %d partitions, and its generations' bits cannot be moved to another number of them (an event's partition and its slots there are both functions of P: only its events could place it again); restore with %d, or make a window of %d partitions and give it the events of a span",
			o.Partitions, h.partitions, h.partitions, o.Partitions)
	}
	o.EventsPerBucket, o.ErrorRate, o.Partitions = h.capacity, h.errorRate, int(h.partitions)
	if h.once != 0 {
		o.IDLifetime = time.Duration(h.once) * time.Second
	}
	if bucketMS < 1 || spanMS < 1 || spanMS > math.MaxInt64/int64(time.Millisecond) {
		return nil, failf(ErrNotFilter, "%s: a window of %d ms buckets over %d ms", name, bucketMS, spanMS)
	}
	o.Bucket, o.Span = time.Duration(bucketMS)*time.Millisecond, time.Duration(spanMS)*time.Millisecond
	w, err := newWindow(rdb, name, o)
	if err != nil {
		return nil, fmt.Errorf("%s: its settings make no window: %w", name, err)
	}
	h.index, h.items, h.inc = 0, 0, ""
	if w.f.parts[0].head != h.encode() || w.settings[0][headerSize:] != suffix {
		return nil, failf(ErrParamsMismatch, "%s: %s with %q, where its own settings make %s with %q (another version of rbloom sizes or places events otherwise)",
			name, h.describe(), suffix, w.f.h.describe(), w.settings[0][headerSize:])
	}
	return w, nil
}

func (w *Window) dump(ctx context.Context, wr io.Writer) (int64, error) {
	f := w.f
	// Every ring checked as every call checks them: one lost (not
	// expired) is an error, not a generation's events gone.
	every := func(int) bool { return true }
	units, checks, err := w.readUnits(ctx, make([][]int, len(f.parts)), every, 1, func(redis.Pipeliner, *ringUnit) {})
	if err != nil {
		return 0, err
	}
	exists := false
	for i, u := range units {
		exists = exists || checks[i].ok || (u.p == w.root && u.head.hasSettings())
	}
	if !exists {
		return 0, failf(ErrNotFound, "%s: no window of that name", f.name)
	}
	suffix := w.settings[0][headerSize:]
	block := make([]byte, 0, 12+len(suffix))
	block = append(block, windowBlockMagic...)
	block = binary.BigEndian.AppendUint32(block, uint32(len(suffix)))
	block = append(block, suffix...)
	block = binary.BigEndian.AppendUint32(block, crc32.Checksum(block, castagnoli))
	token := newToken()
	return writeDump(wr, windowDumpVersion, f.parts[0].head, block, len(f.parts), func(d *dumpWriter, p int) error {
		return w.dumpRing(ctx, d, p, token)
	})
}

// dumpRing writes the section of partition p: its ring, copied to a
// snapshot with its settings read in the same transaction and checked as
// a read checks them (state), or none when the ring is missing and not
// lost.
func (w *Window) dumpRing(ctx context.Context, d *dumpWriter, p int, token string) error {
	key := w.ringKey(p)
	snap := snapshotKey(key, token)
	defer dropSnapshot(ctx, w.f.rdb, snap)
	var rr ringRead
	copied, err := snapshot(ctx, w.f.rdb, key, snap, func(tx redis.Pipeliner) {
		rr.settings = tx.HMGet(ctx, w.settingsKey(p), "s", "ring", "inc")
		rr.head = tx.GetRange(ctx, snap, 0, int64(w.r.state)-1)
		rr.size = tx.StrLen(ctx, snap)
	})
	if err != nil {
		return err
	}
	if w.clock == nil {
		// After the copy: a ring found missing is judged by a time
		// after it was found so (ringRead).
		pipe := w.f.rdb.Pipeline()
		rr.time = pipe.Time(ctx)
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	_, _, ok, err := w.state(p, rr)
	if err != nil {
		return err
	}
	if !copied || !ok {
		return writeSection(ctx, w.f.rdb, d, p, key, snap, 0, 0)
	}
	h, _ := parseHeader(rr.head.Val()[:headerSize]) // state checked it
	return writeSection(ctx, w.f.rdb, d, p, key, snap, h.items, w.r.size-headerSize)
}

// RestoreWindow makes the window called name from a dump that
// Window.Dump wrote, and returns its handle, as Restore does for a
// filter: into another server (Redis 7.0 to 8, Valkey), a cluster, or the
// same server under another name or KeyPrefix. o gives the handle's
// settings (KeyPrefix, UseFunctions, WaitReplicas, WaitTimeout,
// Observer); the window's own come from the dump and must be zero, but
// Partitions, which may state the dump's: a window cannot be restored
// into another number of partitions, since an event's partition and its
// slots there are both functions of P (docs/format.md, Window rings), and
// only its events could place it again. To change P, make a window of
// that many partitions and give it the events of a span.
//
// As Restore, it reads r as it comes and makes nothing visible until the
// whole dump has been read and checked; then it installs every ring, the
// root partition's first, marked as being restored and without its
// settings: every read of the window fails with ErrLoading (the root's
// ring, which every read reads, is installed first and opened last), and
// every call fails, writing nothing. The open then writes each
// partition's settings, the root's last: the root's without a TTL (it
// lasts until Drop), the others' and the rings' TTLs as window.lua gives
// them after a write now. Generations that left the span since the dump
// are cleared by the window's next calls, as after a pause. The restored
// window has a fresh incarnation: operation ids recorded before are not
// replayed on it.
//
// It fails with ErrBadDump when r is not a whole, intact dump of a window
// (a filter's dump: Restore reads it), with ErrExists when a window of
// that name exists, with ErrParamsMismatch when this version of rbloom
// would size or place the window's events otherwise, and with
// ErrInvalidOptions for bad options; in every case it leaves no key
// behind (but as Restore says).
func RestoreWindow(ctx context.Context, rdb Client, name string, o WindowOptions, r io.Reader) (*Window, error) {
	w, err := restoreWindow(ctx, rdb, name, o, r, false)
	return w, callError("window restore", err)
}

// RestoreWindowReplace is RestoreWindow over a window of the same name,
// if one exists: once the dump has been read whole and checked, it drops
// that window (as Window.Drop does, at the dump's number of partitions
// and at the one its stored headers state), then installs the restored
// one. A dump that fails its checks leaves the old window as it was.
func RestoreWindowReplace(ctx context.Context, rdb Client, name string, o WindowOptions, r io.Reader) (*Window, error) {
	w, err := restoreWindow(ctx, rdb, name, o, r, true)
	return w, callError("window restore", err)
}

func restoreWindow(ctx context.Context, rdb Client, name string, o WindowOptions, r io.Reader, replace bool) (*Window, error) {
	if err := o.onlyHandle(); err != nil {
		return nil, err
	}
	if rdb == nil || r == nil {
		return nil, failf(ErrInvalidOptions, "nil Redis client or reader")
	}
	d := &dumpReader{r: r, crc: crc32.New(castagnoli)}
	h, err := d.header()
	if err != nil {
		return nil, err
	}
	if d.version != windowDumpVersion {
		return nil, d.bad("it is a filter's dump: Restore (rbloom restore) restores it")
	}
	suffix, err := d.windowBlock()
	if err != nil {
		return nil, err
	}
	w, err := windowOf(rdb, name, o, h, suffix)
	if err != nil {
		return nil, err
	}
	f := w.f
	if err := f.checkServer(ctx); err != nil {
		return nil, err
	}
	if !replace {
		pipe := rdb.Pipeline()
		ring := pipe.Exists(ctx, w.ringKey(w.root))
		settings := pipe.HGet(ctx, w.settingsKey(w.root), "s") // HGET: the ACL of docs/operations.md
		if err := execAll(ctx, pipe); err != nil {
			return nil, err
		}
		if ring.Val() > 0 || settings.Err() == nil {
			return nil, failf(ErrExists, "%s: the window exists (RestoreWindowReplace, or rbloom restore --replace, replaces it)", name)
		}
	}
	rs := &restorer{f: f, w: w, token: newToken(), inc: randomIncarnation(), replace: w.drop}
	if err := rs.run(ctx, d, replace); err != nil {
		return nil, err
	}
	return w, nil
}

// windowBlock reads and checks a window dump's block and returns the
// settings' text it holds.
func (d *dumpReader) windowBlock() (string, error) {
	var b [8]byte
	if err := d.full(b[:]); err != nil {
		return "", err
	}
	n := binary.BigEndian.Uint32(b[4:])
	if string(b[:4]) != windowBlockMagic {
		return "", d.bad("no %q after the file header of a window's dump", windowBlockMagic)
	}
	if n > maxWindowSuffix {
		return "", d.bad("the window's settings are %d bytes, more than %d", n, maxWindowSuffix)
	}
	rest := make([]byte, n+4)
	if err := d.full(rest); err != nil {
		return "", err
	}
	if crc32.Checksum(append(b[:], rest[:n]...), castagnoli) != binary.BigEndian.Uint32(rest[n:]) {
		return "", d.bad("the checksum of the window's block does not match")
	}
	return string(rest[:n]), nil
}

// checkDumpedState checks the start of a restored ring of partition p,
// its header and state block (at least r.state bytes), as a read checks
// a stored one.
func (w *Window) checkDumpedState(p int, start string) error {
	if len(start) < w.r.state {
		return fmt.Errorf("its ring ends within its state block")
	}
	_, err := w.r.parseState(w.ringKey(p), start[:w.r.state], w.bucket.Milliseconds())
	if d, ok := err.(*detailed); ok {
		return errors.New(d.detail) // what is wrong, not the kind a stored ring's would be
	}
	return err
}

// ringTTLs are the TTL window.lua gives partition p's ring after a write,
// and the one it gives its settings; the root's settings get none (they
// last until Drop).
func (w *Window) ringTTLs(p int) (ring, settings time.Duration) {
	ring = max(time.Duration(w.r.w)*w.bucket, minRingTTL)
	if p == w.root {
		return ring, 0
	}
	ring += otherRingBuckets * w.bucket
	return ring, max(ring+w.bucket, 2*w.f.idLifetime)
}

// ringExpiries sets, by Redis's clock now, when each restored ring
// expires: its TTL from now, or now for a partition without a ring (its
// settings then say it expired).
func (rs *restorer) ringExpiries(ctx context.Context) error {
	pipe := rs.f.rdb.Pipeline()
	clock := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	now := clock.Val().UnixMilli()
	rs.ringAt = make([]int64, len(rs.f.parts))
	for p := range rs.ringAt {
		rs.ringAt[p] = now
		if rs.sizes[p] > 0 {
			ttl, _ := rs.w.ringTTLs(p)
			rs.ringAt[p] += ttl.Milliseconds()
		}
	}
	return nil
}

// restoreCall adds to c, restore.lua's call on partition p's ring, what a
// window's needs: its settings and ring length (0: no ring), when it
// expires (ringAt, nil before the install: then unused, but valid).
func (w *Window) restoreCall(c scriptCall, p int, size int64, ringAt []int64) scriptCall {
	at := int64(1)
	if ringAt != nil {
		at = ringAt[p]
	}
	_, settingsTTL := w.ringTTLs(p)
	c.keys = append(c.keys, w.settingsKey(p))
	c.args[4] = "0" // the ring expires at ARGV[8]
	c.args = append(c.args, strconv.FormatInt(size, 10), w.settings[p], strconv.FormatInt(at, 10), strconv.FormatInt(settingsTTL.Milliseconds(), 10))
	return c
}
