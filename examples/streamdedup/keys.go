package main

// keys names what the example keeps in Redis for one stream. Every key
// carries the stream's name as a hash tag, so that on a Redis Cluster the
// stream, the journals and the counts share one slot and each script below
// stays on one node. (The window's own keys, rbloom:{name}..., live apart:
// the batch id is what ties the two together.)
type keys struct {
	prefix string // "streamdedup:{name}:"
}

func newKeys(name string) keys { return keys{prefix: "streamdedup:{" + name + "}:"} }

// stream is the Redis stream the producer writes and the group reads.
func (k keys) stream() string { return k.prefix + "stream" }

// entry holds the id of the batch that stream entry id belongs to.
func (k keys) entry(id string) string { return k.prefix + "entry:" + id }

// journal is the list of the events of batch id, in the order they were
// deduplicated.
func (k keys) journal(batch string) string { return k.prefix + "batch:" + batch }

// applied is set when batch id's counts have been applied.
func (k keys) applied(batch string) string { return k.prefix + "applied:" + batch }

// counts is a hash from "dimension=value" to the number of new events.
func (k keys) counts() string { return k.prefix + "counts" }

// counted is a hash from event id to the number of times it was counted:
// an audit trail, written in the same step as counts, that must never
// show more than 1.
func (k keys) counted() string { return k.prefix + "counted" }

// group is the consumer group's name.
const group = "counters"
