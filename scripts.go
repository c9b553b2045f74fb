package rbloom

import (
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each write operation is one Lua script: the layout constants, then
// lua/filter.lua, shared, then the operation's own file. Reads need no
// script, but out of memory (see read.go).
var (
	//go:embed lua/filter.lua
	filterLua string

	//go:embed lua/add.lua
	addLua    string
	addScript = redis.NewScript(luaConstants + filterLua + addLua)

	//go:embed lua/remove.lua
	removeLua    string
	removeScript = redis.NewScript(luaConstants + filterLua + removeLua)

	//go:embed lua/rebuild.lua
	rebuildLua    string
	rebuildScript = redis.NewScript(luaConstants + filterLua + rebuildLua)

	//go:embed lua/cuckoo.lua
	cuckooLua    string
	cuckooScript = redis.NewScript(luaConstants + filterLua + cuckooLua)

	//go:embed lua/window.lua
	windowLua    string
	windowScript = redis.NewScript(luaConstants + filterLua + windowLua)

	// readScript is the reads' fallback out of memory (read.go): it only
	// reads, and says so in its first line, which must stay first.
	//go:embed lua/read.lua
	readLua    string
	readScript = redis.NewScript(readLua)
)

// luaConstants are the numbers of the format (header.go) and the limits
// the scripts check, written from the Go constants so that the two never
// disagree. Byte numbers count from 0, as everywhere; Lua's string.sub and
// string.byte count from 1, so the scripts add 1 where they call them.
var luaConstants = fmt.Sprintf(`-- Written by scripts.go from the Go constants.
local HEADER = %d
local IDENTITY = %d
local ITEMS_BYTE = %d
local MARK_BYTE, MARK_REBUILD, MARK_RESIZE, MARK_LOAD = %d, %d, %d, %d
local INC_BYTE, INC_SIZE = %d, %d
local RESERVED_BYTE = %d
local DEFAULT_ONCE = %d
local MAGIC = %q
local VERSION = %d
local COUNTING, CLASSIC = %d, %d
local MAX_HASHES = %d
local MAX_PARTITIONS = %d
local MAX_STRING_BYTES = %d
local RESERVED = "%s" -- the zero bytes after RESERVED_BYTE
local RECORD_FIELD, RECORD_TAG, ONCE_RECORD_KEYS = %d, %d, %d
local REPLY_MISSING, REPLY_FORWARD, REPLY_CREATED = %q, %q, %q
local RING_BUCKET_BYTE, RING_W_BYTE, RING_CURSOR_BYTE = %d, %d, %d
local RING_POSITIONS_BYTE, RING_POSITION_SIZE, RING_FIELD_BITS = %d, %d, %d
local CUCKOO, CUCKOO_BUCKET, MIN_FP, MAX_FP = %d, %d, %d, %d
local CUCKOO_MAX_LOAD, CUCKOO_KICKS, CUCKOO_ITEMS, CUCKOO_MIX = %g, %d, %d, %d
`, headerSize, identitySize, itemsByte, markByte, markRebuild, markResize, markLoad, incByte, incSize, reservedByte, int64(DefaultIDLifetime/time.Second), magic, formatVersion,
	ModeCounting, ModeClassic, MaxHashes, MaxPartitions, maxStringBytes,
	strings.Repeat(`\0`, headerSize-reservedByte), onceFieldBytes, recordTagBytes, onceRecordKeys,
	replyMissing, replyForward, replyCreated,
	ringBucketByte, ringWByte, ringCursorByte, ringPositionsByte, ringPositionSize, ringFieldBits,
	ModeCuckoo, cuckooBucketSize, MinFingerprintBits, MaxFingerprintBits,
	CuckooMaxLoad, cuckooMaxKicks, cuckooItemsPerCall, cuckooMix) + windowLuaConstants
