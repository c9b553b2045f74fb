package rbloom

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spaolacci/murmur3"
)

// Write records make a write apply once. Each script call names a record;
// the script answers from it, writing nothing, when it exists, and keeps
// its answer there when it writes. A call go-redis re-sends after losing
// the reply (FACTS.md: EVALSHA is retried) finds the record of its first
// run; so does an operation id a caller replays (AddOnce and the rest).
//
// A record is a field of a small hash in the partition's hash slot, not a
// key of its own: a key with a TTL costs 150-195 bytes of Redis memory,
// while Redis packs a hash of up to 128 short fields into one listpack at
// a few bytes a field. The hashes are grouped by time into record buckets
// of keep/4 (keep: how long a record must last), and each expires keep
// plus one or two buckets after its first record, so a record lasts at
// least keep and at most keep plus two buckets.
//
// A call's random record is found only by a retry of the same call, which
// sends the same bytes: so each handle writes its own hashes, named after
// it, the bucket and a chunk of recordChunk calls, and the field is the
// call's number in the chunk. A replayed operation id may come from
// another process, later: its field is a hash of the id, in one of
// onceShards hashes per bucket, looked up in the buckets from one ahead (a
// clock running fast) to five behind, which cover keep plus a bucket of clock skew.
const (
	recordChunk          = 100 // records per hash of a handle's random records
	onceFieldBytes       = 12  // an operation id's field: a hash of the id
	recordTagBytes       = 8   // an operation id's tag: a digest of its batch's items
	onceShards           = 256 // hashes per bucket of operation ids' records
	recordBucketsPerKeep = 4
	onceRecordKeys       = recordBucketsPerKeep + 3 // buckets b, b+1, b-1 ... b-5
)

// record is where one script call keeps its answer.
type record struct {
	field string   // the field in each hash
	tag   string   // "" for a random record, else a digest of the batch's items
	keys  []string // the hashes looked in; the answer is kept in the first
	ttl   int64    // ms: the TTL a hash gets from its first record
}

// records names the random records of one handle's calls.
type records struct {
	handle string          // this handle's name among the others: random
	calls  []atomic.Uint64 // calls made to each partition
}

func newRecords(partitions int) *records {
	var id [8]byte
	rand.Read(id[:]) // never fails (crypto/rand documents it)
	return &records{handle: hex.EncodeToString(id[:]), calls: make([]atomic.Uint64, partitions)}
}

// random is a fresh record for one call to partition p, whose key is key,
// which a retry of the call must find within keep.
func (r *records) random(p int, key string, keep time.Duration, now time.Time) record {
	n := r.calls[p].Add(1) - 1
	b, span := recordBucket(keep, now)
	return record{
		field: strconv.FormatUint(n%recordChunk, 10),
		keys:  []string{key + ":r:" + strconv.FormatInt(b, 10) + ":" + r.handle + ":" + strconv.FormatUint(n/recordChunk, 10)},
		ttl:   keep.Milliseconds() + span,
	}
}

// onceRecord is the record of the seq-th call of op ("add", "remove",
// "window") to the partition at key under the caller's operation id,
// tagged with the digest of the whole batch, which every call of the
// batch carries. Ops and sequence numbers keep their fields apart: the
// field hashes all three. The field sent is the call's own, then the
// field of the batch's first call to the partition: a call that finds no
// record of its own but one of the first call with another tag is the id
// used again for another batch (the same items reordered, say), and is
// refused, where it would otherwise apply items the first batch may have
// applied in other calls. All the records of an id in a partition are in
// the same hashes, chosen by op and id. The hash is chosen by keep, the
// filter's IDLifetime, as every process does; it is kept at least retry
// too, this client's retryKeep, since go-redis may re-send the call (the
// same hashes) that late even when keep is shorter.
//
// now is when the batch started, the same for all of its calls (write.go,
// record): they record in the same hash and look in the same ones, so
// that a later call finds its batch's first call's record however long
// the batch takes, and a batch sent again soon after the first send finds
// every record of it however slow its own calls are.
func onceRecord(key, op string, seq int, id, tag string, keep, retry time.Duration, now time.Time) record {
	fieldOf := func(seq int) string {
		h1, h2 := murmur3.Sum128([]byte(op + "\x00" + strconv.Itoa(seq) + "\x00" + id))
		var field [16]byte
		binary.BigEndian.PutUint64(field[:8], h1)
		binary.BigEndian.PutUint64(field[8:], h2)
		return string(field[:onceFieldBytes])
	}
	h1, _ := murmur3.Sum128([]byte(op + "\x00" + id))
	shard := strconv.Itoa(int(h1 % onceShards))
	b, span := recordBucket(keep, now)
	hash := func(b int64) string { return key + ":r:" + strconv.FormatInt(b, 10) + ":once:" + shard }
	keys := make([]string, 0, onceRecordKeys)
	keys = append(keys, hash(b), hash(b+1))
	// Back to b-5: a record is found for keep after its call by clocks
	// up to a bucket (a quarter of keep) apart, which may put the replay
	// up to keep plus a bucket, five buckets, later.
	for d := int64(1); d <= recordBucketsPerKeep+1; d++ {
		keys = append(keys, hash(b-d))
	}
	ttl := max(keep.Milliseconds()+2*span, retry.Milliseconds()+span)
	return record{field: fieldOf(seq) + fieldOf(0), tag: tag, keys: keys, ttl: ttl}
}

// recordBucket returns the record bucket of now for records kept keep,
// and its length in ms.
func recordBucket(keep time.Duration, now time.Time) (int64, int64) {
	span := max(keep.Milliseconds()/recordBucketsPerKeep, 1)
	return now.UnixMilli() / span, span
}

// digest is the tag of an operation id's records: 8 bytes of MurmurHash3
// of the batch's items, item after item, so that the id used again for
// other items, or the same ones in another order, is told from a replay;
// and of how the batch is cut into calls, each with its own record: the
// most items a call takes (perCall) and the partitions. A filter that cuts
// it otherwise (a resize gave it another k or P) never takes a record of
// the first cut for one of its own: see layouts.go.
func digest(items []string, perCall, partitions int) string {
	h := murmur3.New128()
	h.Write([]byte(strconv.Itoa(perCall) + "\x00" + strconv.Itoa(partitions) + "\x00"))
	for _, item := range items {
		h.Write([]byte(item))
		h.Write([]byte{0}) // so that ["ab"] and ["a", "b"] differ
	}
	return string(h.Sum(nil)[:recordTagBytes])
}

// retryKeep is how long a call's random record is kept: as long as
// go-redis may still re-send the call, and at least minRetryKeep. A re-send
// can come as late as every try of the client (MaxRetries+1, or
// MaxRedirects+1 on a cluster) waiting for a connection, dialing it with
// all its dialer retries, writing and reading to their timeouts, with the
// longest backoff between tries: 169 s with go-redis's defaults. With a
// timeout disabled a re-send has no bound, and the record is kept
// maxRetryKeep. Clients other than *redis.Client and *redis.ClusterClient
// get the defaults' horizon.
func retryKeep(rdb Client) time.Duration {
	var tries, dialTries int
	var pool, dial, dialPause, write, read, backoff time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		tries, dialTries = o.MaxRetries+1, o.DialerRetries
		pool, dial, dialPause, write, read, backoff = o.PoolTimeout, o.DialTimeout, o.DialerRetryTimeout, o.WriteTimeout, o.ReadTimeout, o.MaxRetryBackoff
	case *redis.ClusterClient:
		o := c.Options()
		tries, dialTries = o.MaxRedirects+1, o.DialerRetries
		pool, dial, dialPause, write, read, backoff = o.PoolTimeout, o.DialTimeout, o.DialerRetryTimeout, o.WriteTimeout, o.ReadTimeout, o.MaxRetryBackoff
		if pool == 0 { // the node clients' default
			pool = read + time.Second
		}
	default:
		return defaultRetryKeep
	}
	if pool <= 0 || dial <= 0 || write <= 0 || read <= 0 {
		return maxRetryKeep
	}
	perTry := pool + time.Duration(max(dialTries, 1))*(dial+dialPause) + write + read
	return min(maxRetryKeep, max(minRetryKeep, time.Duration(max(tries, 1))*perTry+time.Duration(max(tries-1, 0))*backoff))
}

const (
	// minRetryKeep is the least time a write call's record is kept.
	minRetryKeep = time.Minute
	// defaultRetryKeep is retryKeep for go-redis's default options: 4 tries
	// of a 6 s pool wait, 5 dials of 5 s and 0.1 s, a 5 s write and a 5 s
	// read, and 1 s between tries.
	defaultRetryKeep = 4*(6*time.Second+5*(5100*time.Millisecond)+10*time.Second) + 3*time.Second
	// maxRetryKeep bounds retryKeep: a client whose calls may wait forever
	// could also re-send one after any record has gone.
	maxRetryKeep = 10 * time.Minute
)
