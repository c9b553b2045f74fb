package rbloom

// The names of every Redis key rbloom uses, with the default prefix
// "rbloom:" (Options.KeyPrefix). Braces make a hash tag: a partition, its
// copy and its operation records share one cluster slot, so one script can
// touch them all. See partition.go for which tags a filter's partitions
// have.
//
//	rbloom:{tag}                   a partition
//	rbloom:{tag}:next              its copy while a rebuild fills it
//	rbloom:{tag}:rebuild           the lease of the rebuild that holds it
//	rbloom:{name}:resized          the resizes of the filter name, for the
//	                               handles of the old size (follow.go)
//	rbloom:{tag}:r:<b>:<handle>:<n>  a hash of write records: the n-th
//	                                 hundred of a handle's calls to the
//	                                 partition in record bucket b
//	rbloom:{tag}:r:<b>:once:<s>      records of operation ids in bucket b,
//	                                 shard s of 256 (see records.go)
//	rbloom:{tag}:dump:<token>        a dump's snapshot of the partition
//	rbloom:{tag}:restore:<token>     a restore's staging copy of it
//	rbloom:{name}:restoring          the lock of the restore that is
//	                                 installing the filter name (restore.go)

// DefaultKeyPrefix starts every key when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "rbloom:"

// keyOf is the key of the partition whose hash tag is tag.
func keyOf(prefix, tag string) string { return prefix + "{" + tag + "}" }

// checkKeyPrefix rejects key prefixes that would break the hash tag.
func checkKeyPrefix(prefix string) error {
	if len(prefix) > 64 {
		return failf(ErrInvalidOptions, "KeyPrefix %q: want at most 64 bytes", prefix)
	}
	if !printable(prefix) {
		return failf(ErrInvalidOptions, "KeyPrefix %q: braces and control characters are not allowed", prefix)
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

// leaseKey is the key of the lease of the rebuild that holds the partition
// at key.
func leaseKey(key string) string { return key + ":rebuild" }
