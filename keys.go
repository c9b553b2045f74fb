package rbloom

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
)

// The names of every Redis key rbloom uses, with the default prefix
// "rbloom:" (Options.KeyPrefix). Braces make a hash tag: a partition, its
// copy and its operation records share one cluster slot, so one script can
// touch them all. See partition.go for which tags a filter's partitions
// have.
//
//	rbloom:{tag}                   a partition
//	rbloom:{tag}:next              its copy while a rebuild fills it
//	rbloom:{tag}:op:<32 hex>       the record of one write call (a minute)
//	rbloom:{tag}:once:add:<n>:<id>     the record of the n-th call to this
//	                                   partition of an add under operation id
//	rbloom:{tag}:once:remove:<n>:<id>  the same for a remove

// DefaultKeyPrefix starts every key when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "rbloom:"

// keyOf is the key of the partition whose hash tag is tag.
func keyOf(prefix, tag string) string { return prefix + "{" + tag + "}" }

// checkKeyPrefix rejects key prefixes that would break the hash tag.
func checkKeyPrefix(prefix string) error {
	if len(prefix) > 64 {
		return fmt.Errorf("%w: KeyPrefix %q: want at most 64 bytes", ErrInvalidOptions, prefix)
	}
	if !printable(prefix) {
		return fmt.Errorf("%w: KeyPrefix %q: braces and control characters are not allowed", ErrInvalidOptions, prefix)
	}
	return nil
}

// printable reports whether s holds no braces and no control characters.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '{' || c == '}' || c < ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// copyKey is the key of the copy of the partition at key, during a rebuild.
func copyKey(key string) string { return key + ":next" }

// randomRecordKey is a fresh key for the record of one call to the
// partition at key: a call go-redis re-sends after losing its reply finds
// it and is not applied twice.
func randomRecordKey(key string) string {
	var id [16]byte
	rand.Read(id[:]) // never fails (crypto/rand documents it)
	return key + ":op:" + hex.EncodeToString(id[:])
}

// onceRecordKey is the key of the record of the seq-th call of an op ("add"
// or "remove") on the partition at key under the caller's operation id.
// Adds and removes keep their ids apart; seq comes before the id, which may
// hold anything, so that no two (seq, id) share a key.
func onceRecordKey(key, op string, seq int, id string) string {
	return key + ":once:" + op + ":" + strconv.Itoa(seq) + ":" + id
}
