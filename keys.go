package rbloom

import (
	"crypto/rand"
	"encoding/hex"
)

// The names of every Redis key rbloom uses. Braces make a hash tag: a
// partition, its copy and its operation records share one cluster slot, so
// one script can touch them all. See partition.go for which tags a
// filter's partitions have.
//
//	rbloom:{tag}                   a partition
//	rbloom:{tag}:next              its copy while a rebuild fills it
//	rbloom:{tag}:op:<32 hex>       the record of one write call (a minute)
//	rbloom:{tag}:once:add:<id>     the record of AddOnce's operation id
//	rbloom:{tag}:once:remove:<id>  the record of RemoveOnce's operation id

// keyOf is the key of the partition whose hash tag is tag.
func keyOf(tag string) string { return "rbloom:{" + tag + "}" }

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

// onceRecordKey is the key of the record of the caller's operation id, for
// an op ("add" or "remove") on the partition at key. Adds and removes keep
// their ids apart.
func onceRecordKey(key, op, id string) string {
	return key + ":once:" + op + ":" + id
}
