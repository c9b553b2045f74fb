package memredis

import (
	"errors"
	"math"
	"unsafe"
)

// This file is a port of Redis 7.0's bitfieldGeneric (src/bitops.c): parsing
// first, then the operations on a byte string. It knows nothing of miniredis.
// Integer arithmetic deliberately wraps where Redis's C wraps, so the odd
// corners (SET i8 -9223372036854775808 under OVERFLOW SAT gives 127, "#N"
// offsets that overflow to a small number) come out the same.

// Error replies, word for word as Redis 7.0.15 sends them.
var (
	//lint:ignore ST1005 Redis's own text, full stops included.
	errBitfieldType   = errors.New("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")
	errBitOffset      = errors.New("ERR bit offset is not an integer or out of range")
	errOverflowType   = errors.New("ERR Invalid OVERFLOW type specified")
	errSyntax         = errors.New("ERR syntax error")
	errNotInteger     = errors.New("ERR value is not an integer or out of range")
	errReadOnlyFields = errors.New("ERR BITFIELD_RO only supports the GET subcommand")
	errWrongType      = errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	//lint:ignore ST1005 Redis's own text, full stop included.
	errNoAuth = errors.New("NOAUTH Authentication required.")
)

// maxBulkLen is Redis's default proto-max-bulk-len (512 MB): offsets whose
// byte is at or past it are rejected, as Redis does, so that a typo cannot
// make a test allocate gigabytes.
const maxBulkLen = 512 << 20

type overflow int

const (
	overflowWrap overflow = iota
	overflowSat
	overflowFail
)

type opcode int

const (
	opGet opcode = iota
	opSet
	opIncrby
)

// fieldOp is one parsed GET, SET or INCRBY, with the OVERFLOW mode in force
// where it appeared.
type fieldOp struct {
	code   opcode
	signed bool
	bits   uint
	offset uint64
	value  int64 // SET value or INCRBY increment
	ow     overflow
}

// fieldReply is one element of the reply array; null is the nil that
// OVERFLOW FAIL returns instead of a value.
type fieldReply struct {
	value int64
	null  bool
}

// parseFields appends to ops the subcommands after the key, all of them,
// before anything is read or written: like Redis, one bad subcommand fails
// the whole call.
func parseFields(ops []fieldOp, args []string) ([]fieldOp, error) {
	ow := overflowWrap
	for j := 0; j < len(args); j++ {
		remaining := len(args) - j - 1
		var code opcode
		switch sub := args[j]; {
		case equalFoldASCII(sub, "get") && remaining >= 2:
			code = opGet
		case equalFoldASCII(sub, "set") && remaining >= 3:
			code = opSet
		case equalFoldASCII(sub, "incrby") && remaining >= 3:
			code = opIncrby
		case equalFoldASCII(sub, "overflow") && remaining >= 1:
			j++
			switch mode := args[j]; {
			case equalFoldASCII(mode, "wrap"):
				ow = overflowWrap
			case equalFoldASCII(mode, "sat"):
				ow = overflowSat
			case equalFoldASCII(mode, "fail"):
				ow = overflowFail
			default:
				return ops, errOverflowType
			}
			continue
		default:
			return ops, errSyntax
		}

		op := fieldOp{code: code, ow: ow}
		var err error
		if op.signed, op.bits, err = parseFieldType(args[j+1]); err != nil {
			return ops, err
		}
		if op.offset, err = parseBitOffset(args[j+2], op.bits); err != nil {
			return ops, err
		}
		j += 2
		if code != opGet {
			j++
			var ok bool
			if op.value, ok = parseLongLong(args[j]); !ok {
				return ops, errNotInteger
			}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// parseFieldType parses "i1".."i64" and "u1".."u63". The letter is case
// sensitive in Redis.
func parseFieldType(s string) (signed bool, bits uint, err error) {
	if s == "" || (s[0] != 'i' && s[0] != 'u') {
		return false, 0, errBitfieldType
	}
	signed = s[0] == 'i'
	n, ok := parseLongLong(s[1:])
	if !ok || n < 1 || (signed && n > 64) || (!signed && n > 63) {
		return false, 0, errBitfieldType
	}
	return signed, uint(n), nil
}

// parseBitOffset parses a bit number or "#N", meaning N fields of this width.
func parseBitOffset(s string, bits uint) (uint64, error) {
	hash := len(s) > 0 && s[0] == '#'
	if hash {
		s = s[1:]
	}
	n, ok := parseLongLong(s)
	if !ok {
		return 0, errBitOffset
	}
	if hash {
		n *= int64(bits) // wraps on overflow, as in Redis
	}
	if n < 0 || n>>3 >= maxBulkLen {
		return 0, errBitOffset
	}
	return uint64(n), nil
}

// parseLongLong is Redis's string2ll: plain decimal only, so "+1", "01",
// "-0", " 1" and "1.0" are all rejected where strconv would accept some.
func parseLongLong(s string) (int64, bool) {
	if s == "0" {
		return 0, true
	}
	digits := s
	negative := len(digits) > 0 && digits[0] == '-'
	if negative {
		digits = digits[1:]
	}
	// 19 digits hold any int64, and cannot overflow a uint64.
	if len(digits) == 0 || len(digits) > 19 || digits[0] == '0' {
		return 0, false
	}
	var u uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case negative && u <= 1<<63:
		return int64(-u), true // -(1<<63) wraps to itself: math.MinInt64
	case !negative && u <= math.MaxInt64:
		return int64(u), true
	}
	return 0, false
}

// equalFoldASCII is C's strcasecmp: unlike strings.EqualFold it does not
// treat "ſet" as "set".
func equalFoldASCII(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// hasWrites reports whether any op is a SET or INCRBY.
func hasWrites(ops []fieldOp) bool {
	for _, op := range ops {
		if op.code != opGet {
			return true
		}
	}
	return false
}

// applyFields runs ops in order on the value s and returns the new value
// and the replies. Without a SET or INCRBY it only reads s, and never copies
// it. Otherwise it works on a copy that first grows (zero-filled) to cover
// the highest bit any write touches, even a write that then fails with
// OVERFLOW FAIL: Redis sizes the string before running the ops. GETs past
// the end read zeros and never grow it.
func applyFields(s string, ops []fieldOp) (string, []fieldReply) {
	replies := make([]fieldReply, 0, len(ops))
	if !hasWrites(ops) {
		for _, op := range ops {
			replies = append(replies, fieldReply{value: getField(s, op)})
		}
		return s, replies
	}
	size := len(s)
	for _, op := range ops {
		if op.code != opGet {
			size = max(size, int((op.offset+uint64(op.bits)-1)>>3)+1)
		}
	}
	buf := make([]byte, size)
	copy(buf, s)
	for _, op := range ops {
		if op.code == opGet {
			replies = append(replies, fieldReply{value: getField(buf, op)})
			continue
		}
		replies = append(replies, writeField(buf, op))
	}
	// buf is not used again: the new value can be a string over the same
	// bytes. Values are hundreds of KB for rbloom, and a second copy per
	// write doubled the garbage that decides how often the GC runs.
	return unsafe.String(unsafe.SliceData(buf), len(buf)), replies
}

// byteString is a stored value being read: the string itself, or the copy
// being written.
type byteString interface{ ~string | ~[]byte }

// getField reads the field as a signed or unsigned integer (u63 fits int64).
func getField[S byteString](buf S, op fieldOp) int64 {
	u := getBits(buf, op.offset, op.bits)
	if op.signed && op.bits < 64 && u&(1<<(op.bits-1)) != 0 {
		u |= math.MaxUint64 << op.bits // sign-extend
	}
	return int64(u)
}

// writeField does one SET or INCRBY, following the two code paths of Redis.
func writeField(buf []byte, op fieldOp) fieldReply {
	old := getField(buf, op)
	var newValue, reply int64
	var overflowed bool
	if op.signed {
		if op.code == opIncrby {
			var limit int64
			limit, overflowed = signedOverflow(old, op.value, op.bits, op.ow)
			newValue = old + op.value
			if overflowed {
				newValue = limit
			}
			reply = newValue
		} else {
			newValue = op.value
			if limit, o := signedOverflow(op.value, 0, op.bits, op.ow); o {
				newValue, overflowed = limit, true
			}
			reply = old
		}
	} else {
		value := uint64(op.value)
		if op.code == opIncrby {
			var limit uint64
			limit, overflowed = unsignedOverflow(uint64(old), op.value, op.bits, op.ow)
			value = uint64(old) + uint64(op.value)
			if overflowed {
				value = limit
			}
			reply = int64(value)
		} else {
			if limit, o := unsignedOverflow(value, 0, op.bits, op.ow); o {
				value, overflowed = limit, true
			}
			reply = old
		}
		newValue = int64(value)
	}
	if overflowed && op.ow == overflowFail {
		return fieldReply{null: true}
	}
	setBits(buf, op.offset, op.bits, uint64(newValue))
	return fieldReply{value: reply}
}

// unsignedOverflow is checkUnsignedBitfieldOverflow: whether value+incr
// leaves 0..2^bits-1, and the wrapped or saturated result if so. A negative
// SET value arrives here as a huge unsigned number, so under SAT it
// saturates to the maximum, as in Redis.
func unsignedOverflow(value uint64, incr int64, bits uint, ow overflow) (uint64, bool) {
	maxValue := uint64(1)<<bits - 1 // bits <= 63
	maxIncr := int64(maxValue - value)
	minIncr := -int64(value)
	switch {
	case value > maxValue || (incr > 0 && incr > maxIncr):
		if ow == overflowSat {
			return maxValue, true
		}
	case incr < 0 && incr < minIncr:
		if ow == overflowSat {
			return 0, true
		}
	default:
		return 0, false
	}
	return (value + uint64(incr)) & maxValue, true // WRAP (FAIL ignores it)
}

// signedOverflow is checkSignedBitfieldOverflow, including its wrapping
// maxIncr: that is why a SET of a value near math.MinInt64 saturates to the
// maximum in Redis, and here too.
func signedOverflow(value, incr int64, bits uint, ow overflow) (int64, bool) {
	maxValue := int64(math.MaxInt64)
	if bits < 64 {
		maxValue = 1<<(bits-1) - 1
	}
	minValue := -maxValue - 1
	maxIncr := int64(uint64(maxValue) - uint64(value))
	minIncr := minValue - value
	switch {
	case value > maxValue || (bits != 64 && incr > maxIncr) || (value >= 0 && incr > 0 && incr > maxIncr):
		if ow == overflowSat {
			return maxValue, true
		}
	case value < minValue || (bits != 64 && incr < minIncr) || (value < 0 && incr < 0 && incr < minIncr):
		if ow == overflowSat {
			return minValue, true
		}
	default:
		return 0, false
	}
	// WRAP (FAIL ignores it): add as unsigned, then sign-extend from the top
	// bit of the field.
	c := uint64(value) + uint64(incr)
	if bits < 64 {
		mask := uint64(math.MaxUint64) << bits
		if c&(1<<(bits-1)) != 0 {
			c |= mask
		} else {
			c &^= mask
		}
	}
	return int64(c), true
}

// getBits reads bits bits at offset, most significant bit first as Redis
// numbers them (bit 0 is the high bit of byte 0); past the end reads zeros.
// It goes a byte at a time: a u4 counter is one step.
func getBits[S byteString](buf S, offset uint64, bits uint) uint64 {
	var v uint64
	for bits > 0 {
		skip := uint(offset & 7) // bits of this byte before the field
		n := min(8-skip, bits)   // bits of the field in this byte
		var b byte
		if i := offset >> 3; i < uint64(len(buf)) {
			b = buf[i]
		}
		v = v<<n | uint64(b>>(8-skip-n)&(0xff>>(8-n)))
		offset += uint64(n)
		bits -= n
	}
	return v
}

// setBits writes the low bits bits of v at offset, a byte at a time; buf is
// already big enough.
func setBits(buf []byte, offset uint64, bits uint, v uint64) {
	for bits > 0 {
		skip := uint(offset & 7)
		n := min(8-skip, bits)
		bits -= n // now the bits of v still to write after these n
		after := 8 - skip - n
		mask := byte(0xff>>(8-n)) << after
		i := offset >> 3
		buf[i] = buf[i]&^mask | byte(v>>bits)<<after&mask
		offset += uint64(n)
	}
}
