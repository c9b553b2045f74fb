package rbloom

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"
)

// A filter partition is one Redis string: a fixed 64-byte header followed
// by the slots.
// Keeping the parameters in the same string as the data means a single
// GETRANGE checks both, a script compares them before it writes, and the two
// can never drift apart (a DEL removes both).
//
//	offset  size  field
//	 0       6    magic "rbloom"
//	 6       1    format version (1)
//	 7       1    mode: 'c' counting (4-bit counters), 'b' classic (1 bit),
//	              'k' cuckoo (buckets of 4 fingerprints, cuckoo.go)
//	 8       1    k, the number of hash functions; in a cuckoo filter, f,
//	              the fingerprint width in bits
//	 9       3    the id lifetime in seconds (uint24, big-endian); 0 means
//	              the default, one hour (see Options.IDLifetime)
//	12       4    m, the number of slots (uint32, big-endian); in a cuckoo
//	              filter, of buckets
//	16       4    P, the number of partitions (uint32, big-endian)
//	20       4    this partition's index, 0 to P-1 (uint32, big-endian)
//	24       8    items added minus items removed (int64, big-endian)
//	32       8    capacity n the filter was sized for (uint64)
//	40       8    target error rate p (IEEE 754 float64)
//	48       1    1 while a rebuild copies the partition, 2 while a resize
//	              does, 3 while the filter is loaded (rebuild.lua), else 0
//	49       8    incarnation: random bytes written when the partition is
//	              created, kept by a rebuild; 0 in partitions of old versions
//	57       7    zero
//
// m is the number of slots of this partition; the filter has P*m. Bytes
// 0-23 are the partition's identity: a writer whose identity differs gets
// ErrParamsMismatch. The id lifetime is part of it because where an
// operation id's record lives, and how long it is kept, follow from it: two
// processes that disagreed on it could each miss the other's records and
// apply one id twice. The incarnation tells this partition's operation
// records from those of a filter of the same name that was dropped: a
// record carries the incarnation it was written in, and one of another
// incarnation is never replayed. Bytes 24-63 are not compared. Slot i starts at bit
// 512 + i*w of the string, where w is 4 (counting), 1 (classic) or 4f (a
// cuckoo filter's bucket); the string is always exactly 64 + ceil(m*w/8)
// bytes long.
//
// These constants are the one home of the layout: scripts.go writes them
// into the scripts too (luaConstants), so Go and Lua cannot disagree.
const (
	headerSize   = 64
	identitySize = 24 // bytes 0-23
	itemsByte    = 24 // the item count, bytes 24-31
	onceByte     = 9  // the id lifetime, bytes 9-11
	markByte     = 48 // the rebuild mark
	markRebuild  = 1  // a rebuild holds the partition: adds go to its copy too
	markResize   = 2  // a resize holds it: adds go to the new filter first
	markLoad     = 3  // the filter is being loaded: reads fail with ErrLoading
	incByte      = 49 // the incarnation, bytes 49-56
	incSize      = 8
	reservedByte = 57 // bytes 57-63 are zero
	// maxOnceSeconds is the longest id lifetime the header holds.
	maxOnceSeconds = 1<<24 - 1
	headerBits     = headerSize * 8
	formatVersion  = 1
	magic          = "rbloom"
	// maxStringBytes is the longest string Redis holds: 512 MiB.
	maxStringBytes = 512 << 20
)

// MaxHashes is the largest number of hash functions a filter may use (the
// header keeps k in one byte). It is far above what any useful error rate
// needs (k = 30 gives p near 1e-9).
const MaxHashes = 64

// Mode is the kind of slots a filter has.
type Mode byte

const (
	// ModeCounting is a counting filter: 4-bit counters that support Remove.
	ModeCounting Mode = 'c'
	// ModeClassic is a classic filter: one bit per slot, no Remove.
	ModeClassic Mode = 'b'
	// ModeCuckoo is a cuckoo filter: buckets of 4 fingerprints, with
	// Remove, a quarter of a counting filter's memory and a hard capacity.
	ModeCuckoo Mode = 'k'
)

// String returns "counting", "classic" or "cuckoo".
func (m Mode) String() string {
	switch m {
	case ModeCounting:
		return "counting"
	case ModeClassic:
		return "classic"
	case ModeCuckoo:
		return "cuckoo"
	}
	return fmt.Sprintf("Mode(%q)", byte(m))
}

// width is the size of one slot in bits, for a filter of mode m and k
// hashes (a cuckoo filter: its bucket of 4 fingerprints of k bits).
func width(m Mode, k int) uint64 {
	switch m {
	case ModeCounting:
		return 4
	case ModeCuckoo:
		return cuckooBucketSize * uint64(k)
	}
	return 1
}

// maxSlotsOf is the most slots one Redis string can hold: Redis strings
// are at most 512 MiB, and the header takes 64 bytes of that.
func maxSlotsOf(m Mode, k int) uint64 {
	return (maxStringBytes - headerSize) * 8 / width(m, k)
}

// maxSlots is maxSlotsOf for a counting or classic filter, whose slots
// have one width.
func (m Mode) maxSlots() uint64 { return maxSlotsOf(m, 1) }

// width is the size of one of h's slots in bits.
func (h header) width() uint64 { return width(h.mode, h.k) }

// header is the decoded form of a filter's header.
type header struct {
	mode       Mode
	k          int
	m          uint64
	partitions uint32
	index      uint32 // this partition's
	items      int64
	capacity   uint64
	errorRate  float64
	once       uint32 // the id lifetime in seconds; 0 for the default
	inc        string // the incarnation, incSize bytes; zeros when none
}

// size is the length in bytes of the Redis string holding the filter.
func (h header) size() int64 {
	return headerSize + int64((h.m*h.width()+7)/8)
}

// encode returns the 64 header bytes, with items set to zero.
func (h header) encode() string {
	var b [headerSize]byte
	copy(b[:], magic)
	b[6] = formatVersion
	b[7] = byte(h.mode)
	b[8] = byte(h.k)
	b[onceByte], b[onceByte+1], b[onceByte+2] = byte(h.once>>16), byte(h.once>>8), byte(h.once)
	copy(b[incByte:incByte+incSize], h.inc)
	binary.BigEndian.PutUint32(b[12:], uint32(h.m))
	binary.BigEndian.PutUint32(b[16:], h.partitions)
	binary.BigEndian.PutUint32(b[20:], h.index)
	binary.BigEndian.PutUint64(b[32:], h.capacity)
	binary.BigEndian.PutUint64(b[40:], math.Float64bits(h.errorRate))
	return string(b[:])
}

// parseHeader decodes the first bytes of a Redis string, which must be a
// whole header. Any string that is not a filter of this format version gives
// an error wrapping ErrNotFilter.
func parseHeader(b string) (header, error) {
	if len(b) < headerSize || b[:len(magic)] != magic {
		return header{}, failf(ErrNotFilter, "no rbloom header")
	}
	if b[6] != formatVersion {
		return header{}, failf(ErrNotFilter, "format version %d, this library reads version %d", b[6], formatVersion)
	}
	h := header{
		mode:       Mode(b[7]),
		k:          int(b[8]),
		m:          be(b[12:16]),
		partitions: uint32(be(b[16:20])),
		index:      uint32(be(b[20:24])),
		items:      int64(be(b[24:32])),
		capacity:   be(b[32:40]),
		errorRate:  math.Float64frombits(be(b[40:48])),
		once:       uint32(be(b[onceByte : onceByte+3])),
		inc:        b[incByte : incByte+incSize],
	}
	switch {
	case h.mode != ModeCounting && h.mode != ModeClassic && h.mode != ModeCuckoo:
		return header{}, failf(ErrNotFilter, "unknown mode %d", b[7])
	case h.mode != ModeCuckoo && (h.k < 1 || h.k > MaxHashes):
		return header{}, failf(ErrNotFilter, "k = %d outside 1..%d", h.k, MaxHashes)
	case h.mode == ModeCuckoo && (h.k < MinFingerprintBits || h.k > MaxFingerprintBits):
		return header{}, failf(ErrNotFilter, "fingerprint of %d bits, outside %d..%d", h.k, MinFingerprintBits, MaxFingerprintBits)
	case h.m < 1 || h.m > maxSlotsOf(h.mode, h.k):
		return header{}, failf(ErrNotFilter, "m = %d outside 1..%d", h.m, maxSlotsOf(h.mode, h.k))
	case b[reservedByte:headerSize] != reservedTail:
		// The identity must be exactly what encode writes, or Open would
		// build a filter whose writes are refused as a mismatch.
		return header{}, failf(ErrNotFilter, "reserved header bytes are not zero")
	case h.partitions < 1 || h.partitions > MaxPartitions || h.index >= h.partitions:
		return header{}, failf(ErrNotFilter, "partition %d of %d", h.index, h.partitions)
	}
	return h, nil
}

// describe names the parameters, as error messages (and lua/filter.lua's
// describe) do.
func (h header) describe() string {
	return fmt.Sprintf("%s m=%d k=%d ids=%ds partition %d of %d", h.mode, h.m, h.k, h.onceSeconds(), h.index, h.partitions)
}

// onceSeconds is the id lifetime in seconds, the default's included.
func (h header) onceSeconds() int64 {
	if h.once == 0 {
		return int64(DefaultIDLifetime / time.Second)
	}
	return int64(h.once)
}

// idLifetime is how long operation ids are remembered.
func (h header) idLifetime() time.Duration {
	return time.Duration(h.onceSeconds()) * time.Second
}

// withIndex returns h as the header of partition i.
func (h header) withIndex(i int) header {
	h.index = uint32(i)
	return h
}

// notFilter is err, from parseHeader, as the error of the key it read.
func notFilter(key string, err error) error {
	if d, ok := err.(*detailed); ok {
		return failf(ErrNotFilter, "%s: %s", key, d.detail)
	}
	return failf(ErrNotFilter, "%s: %v", key, err)
}

// reservedTail is what header bytes 57-63 must hold.
var reservedTail = strings.Repeat("\x00", headerSize-reservedByte)

// be decodes a big-endian unsigned integer of up to 8 bytes without copying
// the string, since reads parse the header on every call.
func be(s string) uint64 {
	var v uint64
	for i := 0; i < len(s); i++ {
		v = v<<8 | uint64(s[i])
	}
	return v
}
