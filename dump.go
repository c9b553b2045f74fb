package rbloom

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
)

// A dump is a filter's partitions written out of Redis in a format of
// rbloom's own, not Redis's DUMP payload: DUMP is bound to the server's RDB
// version (a payload of Redis 8 does not load into Valkey, nor into an
// older Redis), and RedisBloom's SCANDUMP and LOADCHUNK had replication
// bugs. A dump loads into any server rbloom runs on, under another
// KeyPrefix, and into a cluster. docs/format.md ("Dumps") gives the layout;
// all integers are big-endian, every checksum CRC-32C (Castagnoli):
//
//	file header    "RBLMDUMP", the dump version (uint32), the filter's
//	               64-byte header (partition 0's, with index, items, mark
//	               and incarnation zero), CRC of those 76 bytes
//	P sections     "PART", the index (uint32), the items (int64), n the
//	               slot bytes (uint64), CRC of those 24 bytes; the n bytes
//	               that follow the partition's header in Redis; their CRC
//	trailer        "DONE", P (uint32), the bytes before the trailer
//	               (uint64), CRC of every byte of the dump before it
//
// Both sides stream: a partition moves in chunks of dumpChunk bytes,
// dumpRoundTrip of them per round trip, so that neither side holds more
// than that of a filter, however big.

const (
	dumpMagic   = "RBLMDUMP"
	dumpVersion = 1 // a filter's dump
	// windowDumpVersion is a window's dump (window_dump.go): a reader
	// that knows only version 1 refuses it rather than take its rings
	// for a filter's slots.
	windowDumpVersion = 2
	dumpHeadSize      = len(dumpMagic) + 4 + headerSize + 4 // 80
	sectionMagic      = "PART"
	sectionSize       = len(sectionMagic) + 4 + 8 + 8 + 4 // 28
	trailerMagic      = "DONE"
	trailerSize       = len(trailerMagic) + 4 + 8 + 4 // 20
	dumpChunk         = 1 << 20                       // bytes per GETRANGE or SETRANGE
	dumpRoundTrip     = 8                             // chunks per pipeline
	// dumpKeyLife is the TTL of a dump's snapshot and of a restore's
	// staging keys, renewed while they are in use: a process that dies
	// leaves them for at most that long.
	dumpKeyLife = 30 * time.Second
)

// ErrBadDump is returned by Restore for input that is not a whole, intact
// dump of this version: another file, a truncated or damaged one (a
// checksum or a length that does not match), or one with bytes after its
// end. Nothing is left in Redis.
var ErrBadDump = newKind("not a sound rbloom dump")

// castagnoli is the CRC-32C table of every checksum of a dump.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Dump writes the filter to w in rbloom's dump format (docs/format.md,
// "Dumps"), which Restore reads, into any server rbloom runs on (Redis
// 7.0 to 8, Valkey), under any KeyPrefix, on a cluster or not. It returns
// the bytes written, as io.WriterTo does. The filter keeps serving.
//
// Each partition is read from a snapshot: a COPY of its key to a key in
// the same cluster slot ("<key>:dump:<token>", expiring 30 s after its
// last use, deleted once read), read in chunks of 1 MiB with GETRANGE.
// So each partition is dumped as it was at one moment, whatever writers
// do meanwhile; the partitions are taken one after the other, not at one
// moment together: an item added or removed while Dump runs may be in the
// dump or not, and every item whose add returned before Dump was called,
// and that no remove took since, is in it. The COPY needs, for the time of one partition's read, as much
// free memory as that partition (64 MiB by default), holds the server for
// the copy (tens of milliseconds per 64 MiB: docs/benchmarks.md, Dump
// and restore), and needs Redis 6.2 or Valkey.
// Dump holds about 8 MiB of the filter in memory, never the whole.
//
// It fails with ErrNotFound when the filter does not exist, ErrLoading
// while it is being loaded (its slots do not hold every item yet),
// ErrDamaged when a partition is missing or of the wrong length, and
// ErrParamsMismatch when a partition holds another filter's header (a
// resize switched it: Open the filter again). What was written to w
// before an error is not a dump: Restore refuses it.
func (b *base) Dump(ctx context.Context, w io.Writer) (int64, error) {
	return observe(ctx, b.f.obs, b.callOf("Dump", 0), func(ctx context.Context) (int64, error) {
		n, err := b.f.current().dump(ctx, w)
		return n, callError("dump", err)
	})
}

// dumpWriter writes to w, counting the bytes and keeping their CRC.
type dumpWriter struct {
	w   io.Writer
	n   int64
	crc hash.Hash32
}

func (d *dumpWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.n += int64(n)
	d.crc.Write(p[:n])
	return n, err
}

// newToken returns a random token naming one dump's or restore's keys.
func newToken() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// snapshotKey is the key a dump copies the partition at key to.
func snapshotKey(key, token string) string { return key + ":dump:" + token }

func (f *filter) dump(ctx context.Context, w io.Writer) (int64, error) {
	head, err := f.storedHeader(ctx)
	if err != nil {
		return 0, err
	}
	token := newToken()
	return writeDump(w, dumpVersion, head.encode(), nil, len(f.parts), func(d *dumpWriter, p int) error {
		return f.dumpPartition(ctx, d, p, token)
	})
}

// writeDump writes a dump of the given version to w: the file header
// with head, the bytes of more (a window's block), the section of each
// of the parts partitions, which section writes, and the trailer.
func writeDump(w io.Writer, version uint32, head string, more []byte, parts int, section func(d *dumpWriter, p int) error) (int64, error) {
	d := &dumpWriter{w: w, crc: crc32.New(castagnoli)}
	var fh [dumpHeadSize]byte
	copy(fh[:], dumpMagic)
	binary.BigEndian.PutUint32(fh[8:], version)
	copy(fh[12:], head)
	binary.BigEndian.PutUint32(fh[76:], crc32.Checksum(fh[:76], castagnoli))
	if _, err := d.Write(append(fh[:], more...)); err != nil {
		return d.n, err
	}
	for p := range parts {
		if err := section(d, p); err != nil {
			return d.n, err
		}
	}
	var tr [trailerSize]byte
	copy(tr[:], trailerMagic)
	binary.BigEndian.PutUint32(tr[4:], uint32(parts))
	binary.BigEndian.PutUint64(tr[8:], uint64(d.n))
	d.crc.Write(tr[:16])
	binary.BigEndian.PutUint32(tr[16:], d.crc.Sum32())
	if _, err := d.w.Write(tr[:]); err != nil {
		return d.n, err
	}
	d.n += int64(trailerSize)
	return d.n, nil
}

// storedHeader returns the header of f's partition 0 as stored (its
// capacity and error rate, which writers do not compare, included), as a
// dump's file header holds it: index, items, mark and incarnation zero.
func (f *filter) storedHeader(ctx context.Context) (header, error) {
	pipe := f.rdb.Pipeline()
	head := pipe.GetRange(ctx, f.parts[0].key, 0, headerSize-1)
	size := pipe.StrLen(ctx, f.parts[0].key)
	_, err := pipe.Exec(ctx)
	v := head.Val()
	if err == nil && v == "" {
		s, serr := f.survey(ctx)
		switch {
		case serr != nil:
			return header{}, serr
		case !s.any:
			return header{}, f.notFound()
		}
		return header{}, failf(ErrDamaged, "%s: %s is missing", f.name, f.parts[0].key)
	}
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		return header{}, anotherType(f.parts[0].key)
	}
	if err != nil {
		return header{}, err
	}
	if err := f.check(0, v, size.Val()); err != nil {
		return header{}, err
	}
	h, err := parseHeader(v)
	if err != nil {
		return header{}, notFilter(f.parts[0].key, err)
	}
	h.index, h.items, h.inc = 0, 0, ""
	return h, nil
}

// dumpPartition writes the section of partition p: it copies the
// partition to a snapshot, then streams the snapshot in chunks.
func (f *filter) dumpPartition(ctx context.Context, d *dumpWriter, p int, token string) error {
	key := f.parts[p].key
	snap := snapshotKey(key, token)
	defer dropSnapshot(ctx, f.rdb, snap)
	var head *redis.StringCmd
	var size *redis.IntCmd
	copied, err := snapshot(ctx, f.rdb, key, snap, func(tx redis.Pipeliner) {
		head = tx.GetRange(ctx, snap, 0, headerSize-1)
		size = tx.StrLen(ctx, snap)
	})
	if err != nil {
		return err
	}
	if !copied {
		return failf(ErrDamaged, "%s: %s is missing", f.name, key)
	}
	if err := f.check(p, head.Val(), size.Val()); err != nil {
		return err
	}
	if head.Val()[markByte] == markLoad {
		return f.loadingErr(p)
	}
	h, _ := parseHeader(head.Val()) // check parsed it
	return writeSection(ctx, f.rdb, d, p, key, snap, h.items, size.Val()-headerSize)
}

// snapshot copies key to snap in one transaction, with what more queues
// after the copy (reads of snap, and of keys of its slot), and reports
// whether key existed.
func snapshot(ctx context.Context, rdb Client, key, snap string, more func(tx redis.Pipeliner)) (bool, error) {
	tx := rdb.TxPipeline()
	// Not go-redis's Copy, which names database 0: the client's own.
	copied := redis.NewIntCmd(ctx, "COPY", key, snap, "REPLACE")
	_ = tx.Process(ctx, copied)
	tx.PExpire(ctx, snap, dumpKeyLife)
	more(tx)
	if _, err := tx.Exec(ctx); err != nil && err != redis.Nil {
		if cerr := copied.Err(); cerr != nil {
			err = cerr // the cause, not EXECABORT
		}
		if redis.HasErrorPrefix(err, "ERR unknown command") {
			return false, failf(ErrUnsupported, "%s: COPY (Redis 6.2 or later, or Valkey) is needed to read a partition at one moment", key)
		}
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return false, anotherType(key)
		}
		return false, fmt.Errorf("%s: copying it for a consistent read: %w", key, err)
	}
	return copied.Val() == 1, nil
}

// dropSnapshot deletes a snapshot, whatever ctx: done, or given up.
func dropSnapshot(ctx context.Context, rdb Client, snap string) {
	pipe := rdb.Pipeline()
	pipe.Del(context.WithoutCancel(ctx), snap)
	_, _ = pipe.Exec(context.WithoutCancel(ctx)) // else it expires
}

// writeSection writes the section of partition p, whose string at key was
// copied to snap: its head (items, n), the n bytes of snap after its
// header, read in chunks, and their CRC.
func writeSection(ctx context.Context, rdb Client, d *dumpWriter, p int, key, snap string, items, n int64) error {
	var sec [sectionSize]byte
	copy(sec[:], sectionMagic)
	binary.BigEndian.PutUint32(sec[4:], uint32(p))
	binary.BigEndian.PutUint64(sec[8:], uint64(items))
	binary.BigEndian.PutUint64(sec[16:], uint64(n))
	binary.BigEndian.PutUint32(sec[24:], crc32.Checksum(sec[:24], castagnoli))
	if _, err := d.Write(sec[:]); err != nil {
		return err
	}
	crc := crc32.New(castagnoli)
	for off := int64(0); off < n; {
		pipe := rdb.Pipeline()
		var reads []*redis.StringCmd
		var want []int64
		for i := 0; i < dumpRoundTrip && off < n; i++ {
			end := min(off+dumpChunk, n)
			reads = append(reads, pipe.GetRange(ctx, snap, headerSize+off, headerSize+end-1))
			want = append(want, end-off)
			off = end
		}
		pipe.PExpire(ctx, snap, dumpKeyLife)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("%s: reading its snapshot %s: %w", key, snap, err)
		}
		for i, r := range reads {
			if int64(len(r.Val())) != want[i] {
				// Evicted, deleted or flushed under the dump.
				return fmt.Errorf("%s: its snapshot %s vanished while it was read", key, snap)
			}
			b := []byte(r.Val())
			crc.Write(b)
			if _, err := d.Write(b); err != nil {
				return err
			}
		}
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc.Sum32())
	_, err := d.Write(sum[:])
	return err
}
