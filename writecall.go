package rbloom

import (
	"strings"
)

// writeCall is one call of add.lua, remove.lua or cuckoo.lua, its
// arguments by name; wire puts them in the order the script reads them
// (each script's header documents its KEYS and ARGV).
type writeCall struct {
	script  scriptKind
	key     string // the partition
	head    string // its header; with the incarnation it gets when the call may create it
	ttl     string // ms, for a partition the call creates
	rec     record
	keep    string     // ms: the TTL a record hash gets from its first record
	create  createMode // what the call may do besides applying the items
	answers []bool     // with recordOnly: the answers to record
	limit   string     // the most items the partition may hold after the call, "0" for no bound
	absent  bool       // add only the items that test absent
	args    []any      // ARGV: headArgs values that wire sets, then the items' slot offsets
}

// scriptKind says which script a writeCall is for, and so its ARGV.
type scriptKind byte

const (
	addCall          scriptKind = iota // add.lua
	removeCall                         // remove.lua
	cuckooAddCall                      // cuckoo.lua, adding
	cuckooRemoveCall                   // cuckoo.lua, removing
)

// createMode is add.lua's (and cuckoo.lua's) ARGV[4].
type createMode byte

const (
	mayNotCreate     createMode = '0' // a missing partition answers replyMissing
	mayCreate        createMode = '1' // a missing partition is created, empty, first
	alreadyForwarded createMode = 'f' // the items are in the copies of a resize already
	recordOnly       createMode = 'r' // record answers as this call's, change nothing
)

// createModeOf is the mode of a call that may, or may not, create its
// partition.
func createModeOf(may bool) createMode {
	if may {
		return mayCreate
	}
	return mayNotCreate
}

// headArgs is the number of ARGV before the items' offsets.
func (k scriptKind) headArgs() int {
	switch k {
	case removeCall:
		return 4
	case cuckooAddCall, cuckooRemoveCall:
		return 9
	}
	return 8
}

// wire returns the call as the script takes it. Its ARGV is c.args, whose
// first headArgs values it sets: the offsets are written once, however
// often the call is sent.
func (c writeCall) wire() scriptCall {
	keys := make([]string, 0, 2+len(c.rec.keys))
	args := c.args
	if c.script == removeCall {
		copy(args, []any{c.head, c.keep, c.rec.field, c.rec.tag})
		return scriptCall{keys: append(append(keys, c.key), c.rec.keys...), args: args}
	}
	create := string(c.create)
	if c.create == recordOnly {
		b := []byte(create)
		for _, a := range c.answers {
			b = append(b, "01"[boolInt(a)])
		}
		create = string(b)
	}
	onlyAbsent := "0"
	if c.absent {
		onlyAbsent = "1"
	}
	copy(args, []any{c.head, c.ttl, c.keep, create, c.limit, c.rec.field, c.rec.tag, onlyAbsent})
	switch c.script {
	case cuckooAddCall:
		args[8] = cuckooOp(false)
	case cuckooRemoveCall:
		args[8] = cuckooOp(true)
	}
	keys = append(keys, c.key, copyKey(c.key))
	return scriptCall{keys: append(keys, c.rec.keys...), args: args}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wires returns the calls as the scripts take them.
func wires(calls []writeCall) []scriptCall {
	out := make([]scriptCall, len(calls))
	for i := range calls {
		out[i] = calls[i].wire()
	}
	return out
}

// The first byte of a write script's reply, when it is not an answer;
// the scripts take them from luaConstants.
const (
	replyMissing = "?" // nothing written: the partition is missing, or its batch's first call left nothing
	replyForward = "!" // nothing written: a resize holds the partition; the new filter's header follows
	replyCreated = "+" // the call created the partition; its answers follow
)

// writeReply is a write script's reply, decoded.
type writeReply struct {
	missing bool   // replyMissing
	target  string // replyForward: the header of the filter being resized into
	created bool   // the call created its partition
	answers string // a '1' or '0' per item
}

// wrote reports whether the call may have written anything.
func (r writeReply) wrote() bool { return !r.missing && r.target == "" }

func decodeWriteReply(r string) writeReply {
	if r == replyMissing {
		return writeReply{missing: true}
	}
	if t, ok := strings.CutPrefix(r, replyForward); ok {
		return writeReply{target: t}
	}
	if a, ok := strings.CutPrefix(r, replyCreated); ok {
		return writeReply{created: true, answers: a}
	}
	return writeReply{answers: r}
}
