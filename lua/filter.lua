-- filter.lua: the part every write script shares. scripts.go sends it in
-- front of add.lua and remove.lua, so that each of them is one Redis script.
--
-- A filter partition is one Redis string: a header of HEADER bytes, then
-- the slots (the layout is documented in header.go, whose constants
-- scripts.go writes in front of this file). Redis does not roll a script
-- back when it fails half-way, so the functions here only read, and every
-- script checks all of its arguments with them before its first write.

local MAX_SLOTS = 1500 -- 4 BITFIELD arguments each: unpack() fails past about 8000
local ITEMS_BIT = ITEMS_BYTE * 8
-- Positions in the BITFIELD call that slots builds: the OVERFLOW mode and
-- the change of the item count among its arguments, and the first slot's
-- among its replies (the item count's comes first).
local BF_OVERFLOW, BF_ITEMS, FIRST_SLOT_REPLY = 2, 6, 2

local function reject(code, msg)
  return redis.error_reply('RBLOOM_' .. code .. ' ' .. msg)
end

-- int returns s as a whole number in [lo, hi], or nil.
local function int(s, lo, hi)
  local v = tonumber(s)
  if v and v % 1 == 0 and v >= lo and v <= hi then return v end
  return nil
end

-- parse checks a header and returns its fields, or nil and why not. It
-- runs on every write, so it reads bytes 1-24 with one string.byte.
local function parse(h)
  if #h ~= HEADER or string.sub(h, 1, #MAGIC) ~= MAGIC then
    return nil, 'no rbloom header'
  end
  -- Bytes 6 to 23: version, mode, k, the id lifetime (uint24), then m, P
  -- and the index (uint32 big-endian each).
  local _, _, _, _, _, _, version, mode, k, o1, o2, o3,
    m1, m2, m3, m4, p1, p2, p3, p4, i1, i2, i3, i4 = string.byte(h, 1, IDENTITY)
  if version ~= VERSION then
    return nil, 'format version ' .. version .. ', this library reads version ' .. VERSION
  end
  if string.sub(h, RESERVED_BYTE + 1) ~= RESERVED then
    return nil, 'reserved header bytes are not zero'
  end
  local m = ((m1 * 256 + m2) * 256 + m3) * 256 + m4
  local parts = ((p1 * 256 + p2) * 256 + p3) * 256 + p4
  local index = ((i1 * 256 + i2) * 256 + i3) * 256 + i4
  local once = (o1 * 256 + o2) * 256 + o3
  if once == 0 then once = DEFAULT_ONCE end
  local f = {k = k, m = m, parts = parts, index = index, once = once, ident = string.sub(h, 1, IDENTITY)}
  if mode == COUNTING then f.mode, f.width, f.modeName = 'c', 4, 'counting'
  elseif mode == CLASSIC then f.mode, f.width, f.modeName = 'b', 1, 'classic'
  elseif mode == CUCKOO then
    -- k is the fingerprint width; a slot is a bucket of CUCKOO_BUCKET.
    f.mode, f.width, f.modeName = 'k', CUCKOO_BUCKET * k, 'cuckoo'
    if k < MIN_FP or k > MAX_FP then return nil, 'fingerprint of ' .. k .. ' bits, outside ' .. MIN_FP .. '..' .. MAX_FP end
  else return nil, 'unknown mode ' .. mode end
  if k < 1 or k > MAX_HASHES then return nil, 'k = ' .. k .. ' outside 1..' .. MAX_HASHES end
  if m < 1 or m * f.width > (MAX_STRING_BYTES - HEADER) * 8 then
    return nil, 'm = ' .. m .. ' does not fit in a Redis string'
  end
  if parts < 1 or parts > MAX_PARTITIONS or index >= parts then
    return nil, 'partition ' .. index .. ' of ' .. parts
  end
  f.size = HEADER + math.ceil(m * f.width / 8)
  return f
end

-- describe names a filter's parameters as error messages do.
local function describe(f)
  return f.modeName .. ' m=' .. f.m .. ' k=' .. f.k .. ' ids=' .. f.once .. 's partition ' .. f.index .. ' of ' .. f.parts
end

-- incarnation returns the incarnation kept in a header (see header.go).
local function incarnation(head)
  return string.sub(head, INC_BYTE + 1, INC_BYTE + INC_SIZE)
end

-- open compares the filter stored at key with f, parsed from the header
-- the caller expects. It returns true and the stored header if the filter
-- exists, false if the key does not, or nil, nil and an error reply.
local function open(key, f)
  local head = redis.pcall('GETRANGE', key, 0, HEADER - 1)
  if type(head) == 'table' then
    -- Only WRONGTYPE says what the key holds; pass any other error on (an
    -- ACL refusal must not make a healthy filter look like something else).
    if string.find(head.err, 'WRONGTYPE', 1, true) then
      return nil, nil, reject('NOTFILTER', key .. ' holds another type')
    end
    return nil, nil, head
  end
  if head == '' then
    if redis.call('EXISTS', key) == 1 then
      return nil, nil, reject('NOTFILTER', key .. ' holds an empty string')
    end
    return false
  end
  if string.sub(head, 1, IDENTITY) ~= f.ident then
    local have, why = parse(head)
    if not have then return nil, nil, reject('NOTFILTER', key .. ': ' .. why) end
    return nil, nil, reject('MISMATCH', key .. ' is ' .. describe(have) .. ', caller wants ' .. describe(f))
  end
  local size = redis.call('STRLEN', key)
  if size ~= f.size then
    return nil, nil, reject('DAMAGED', key .. ' is ' .. size .. ' bytes long, want ' .. f.size)
  end
  if string.sub(head, RESERVED_BYTE + 1) ~= RESERVED then
    return nil, nil, reject('NOTFILTER', key .. ': reserved header bytes are not zero')
  end
  return true, head
end

-- loading reports whether the partition whose header is head is being
-- loaded (MARK_LOAD, set by rebuild.lua): its slots do not hold every item
-- yet, so nothing may be answered "absent" from them.
local function loading(head)
  return head ~= nil and string.byte(head, MARK_BYTE + 1) == MARK_LOAD
end

-- copyOf returns copy, the key of the partition's copy being rebuilt, when
-- the partition whose header is head is being rebuilt or loaded into it
-- (MARK_REBUILD or MARK_LOAD) and it holds a copy of the same identity:
-- every write then goes to both. It returns nil otherwise, or nil and an
-- error reply.
local function copyOf(head, f, copy)
  if not head then return nil end
  local mark = string.byte(head, MARK_BYTE + 1)
  if mark ~= MARK_REBUILD and mark ~= MARK_LOAD then return nil end
  local exists, _, err = open(copy, f)
  if err then return nil, err end
  if exists then return copy end
  return nil
end

-- addArgs checks the arguments add.lua and cuckoo.lua share (ARGV[2] to
-- ARGV[5] and ARGV[8], see add.lua) and returns the TTL, the record's
-- TTL, the item bound and the create flag, or nil and an error reply.
local function addArgs(argv)
  local ttl = int(argv[2], 0, 2^50)
  local keep = int(argv[3], 1, 2^50)
  local limit = int(argv[5], 0, 2^53)
  if not ttl or not keep or not limit then
    return nil, reject('ARGS', 'ARGV[2], ARGV[3] or ARGV[5] is not a whole number in range')
  end
  local create, answers = argv[4], nil
  if string.sub(create, 1, 1) == 'r' then
    answers, create = string.sub(create, 2), 'r'
    if string.find(answers, '[^01]') then return nil, reject('ARGS', 'ARGV[4] is r and answers that are not all 0 or 1') end
  end
  if create ~= '0' and create ~= '1' and create ~= 'f' and create ~= 'r' then
    return nil, reject('ARGS', 'ARGV[4] is not 0, 1, f, or r and answers')
  end
  if argv[8] ~= '0' and argv[8] ~= '1' then return nil, reject('ARGS', 'ARGV[8] is not 0 or 1') end
  return {ttl = ttl, keep = keep, limit = limit, create = create, answers = answers}
end

-- resizing returns the header of the filter a resize moves the partition
-- whose header is head into (kept at copyKey, see rebuild.lua) when the
-- partition is marked MARK_RESIZE, or nil. The items of an add then go to
-- that filter first (add.lua's '!' reply).
local function resizing(head, copyKey)
  if string.byte(head, MARK_BYTE + 1) ~= MARK_RESIZE then return nil end
  local target = redis.call('GETRANGE', copyKey, 0, HEADER - 1)
  if #target == HEADER then return target end
  return nil -- no target: the resize is over or lapsed, and its mark stayed
end

-- itemsOf returns the item count kept in the header head, from ITEMS_BYTE
-- (big-endian int64). A negative count (removes of false positives) reads
-- as 0. Doubles are exact far beyond any real count.
local function itemsOf(head)
  local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(head, ITEMS_BYTE + 1, ITEMS_BYTE + 8)
  if b1 >= 128 then return 0 end
  return ((((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6) * 256 + b7) * 256 + b8
end

-- Write records (records.go). A call's record is the field `field` (1 to
-- RECORD_FIELD bytes) of the hashes KEYS[first..#KEYS]: one hash for a
-- call's random record (tag empty), ONCE_RECORD_KEYS for an operation id's
-- (tag: RECORD_TAG bytes, a digest of the whole batch). Under an id the
-- argument holds two fields of RECORD_FIELD bytes: the call's own, then
-- that of the batch's first call to the partition. A record's value is the
-- tag, then the answer. An operation id's tag starts with the incarnation
-- of the partition it was applied to (see header.go), so that a record
-- left by a filter that was dropped is never replayed on its successor.

-- REFUSED starts the record of a call under an operation id that was
-- refused as full and applied nothing (see full): the incarnation, then
-- REFUSED and the tag, where a record has the tag and the answer. An
-- rbloom that does not know it reads another tag there, and refuses the id.
local REFUSED = '\0refused\0'

-- ownField is the field a call records its answer in.
local function ownField(field, tag)
  if tag == '' then return field end
  return string.sub(field, 1, RECORD_FIELD)
end

-- replay checks the record's arguments and returns the answer an earlier
-- run of this call recorded, or nil if there is none. inc is the
-- partition's incarnation, or '' for a call that is not under an operation
-- id. A record with another tag in the same incarnation, this call's or
-- the batch's first call's, means the operation id was used for another
-- batch: the second return value is then an error reply, and nothing may
-- be written. The third is true for a later call of a batch whose first
-- call to the partition left nothing here in this incarnation (see
-- firstMissing).
local function replay(first, field, tag, inc)
  local n = #KEYS - first + 1
  if not ((tag == '' and n == 1 and #field >= 1 and #field <= RECORD_FIELD) or
      (#tag == RECORD_TAG and n == ONCE_RECORD_KEYS and #field == 2 * RECORD_FIELD)) then
    return nil, reject('ARGS', 'want a record field of 1 to ' .. RECORD_FIELD .. ' bytes, an empty tag and 1 record key, ' ..
      'or two fields of ' .. RECORD_FIELD .. ' bytes, a ' .. RECORD_TAG .. '-byte tag and ' .. ONCE_RECORD_KEYS ..
      ' keys (got ' .. #field .. ', ' .. #tag .. ', ' .. n .. ')')
  end
  if tag == '' then inc = '' end
  local own = ownField(field, tag)
  local firstCall = string.sub(field, RECORD_FIELD + 1)
  local other = false -- the batch's first call here recorded another tag
  local firstSeen = (tag == '' or firstCall == own) -- its record or mark, here
  local refused = inc .. REFUSED .. tag -- this call, refused as full before
  for i = first, #KEYS do
    local done, head
    if tag == '' or firstCall == own then
      done = redis.call('HGET', KEYS[i], own)
    else
      local got = redis.call('HMGET', KEYS[i], own, firstCall)
      done, head = got[1], got[2]
    end
    if done == refused then
      done = nil -- applied nothing: it goes on, and its record replaces this
    end
    if done and string.sub(done, 1, #inc) == inc then
      if string.sub(done, #inc + 1, #inc + #tag) ~= tag then
        return nil, reject('OPID', KEYS[i] .. ' records another operation under this id')
      end
      -- Written again, unchanged: a replay under WaitReplicas then waits
      -- for the replicas to have the first run's writes, which came before
      -- (a connection that wrote nothing is not waited for by Redis 8).
      redis.call('HSET', KEYS[i], own, done)
      local answer = string.sub(done, #inc + #tag + 1)
      if string.sub(answer, 1, 1) == 'F' then return nil, reject('FULL', string.sub(answer, 2)) end
      return answer
    end
    if head and string.sub(head, 1, #inc) == inc then
      firstSeen = true
      if head ~= refused and string.sub(head, #inc + 1, #inc + #tag) ~= tag then other = true end
    end
  end
  if other then
    return nil, reject('OPID', 'the first call of this id here records another batch')
  end
  return nil, nil, not firstSeen
end

-- firstMissing is the answer of a write call under an operation id that
-- is not its batch's first call to the partition, when that first call
-- left neither its record nor a refusal here, in this incarnation: it ran
-- first, so the partition was replaced since (a Drop, a TTL, a Create of a
-- missing partition) or the call answered '?'. Applied, this call would be
-- applied again by the id sent again cut another way, whose first call
-- finds nothing either (found by an outside review: reordered, 36 items
-- written with ErrOpIDReused, 4 of them a second time). It writes
-- nothing and answers '?', as for a partition that does not exist: the
-- client sends its calls again, in order, or fails.
local FIRST_MISSING = REPLY_MISSING

-- storeRecord stores value as field's record in the hash key, which then
-- lives at least ttl ms more: a hash of operation ids is shared by every
-- process, and one whose client re-sends later than the others' must not
-- see its record expire with a hash another process made.
local function storeRecord(key, field, tag, value, ttl)
  redis.call('HSET', key, ownField(field, tag), value)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end

-- remember records a call's answer; inc and tag as in replay.
local function remember(key, field, tag, inc, answer, ttl)
  if tag == '' then inc = '' end
  storeRecord(key, field, tag, inc .. tag .. answer, ttl)
end

-- createEmpty makes the partition key of filter f, holding no item: its
-- string at full length, in one allocation, with the header head (its
-- item count 0), and the TTL ttl ms (0: none).
local function createEmpty(key, f, head, ttl)
  redis.call('SETRANGE', key, f.size - 1, '\0')
  redis.call('SETRANGE', key, 0, head)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end

-- recordOnly is a call whose items are in the partition already: they were
-- added to it while it was the copy of a resize, which then switched in
-- before the caller's call to the old partition (write.go,
-- recordForwarded). It records answers, one per item, as its own and
-- changes nothing, so that the operation id, sent again, is not applied a
-- second time.
local function recordOnly(record, field, tag, inc, answers, n, keep)
  if #answers ~= n then return reject('ARGS', 'ARGV[4]: ' .. #answers .. ' answers for ' .. n .. ' items') end
  remember(record, field, tag, inc, answers, keep)
  return answers
end

-- full returns the FULL error for why. A call whose items the client has
-- already added to the copies of a resize (create 'f') first records the
-- refusal, as 'F' and why, which replay answers with: sent again, before
-- or after the switch, the call is refused again, never applied, so the
-- client's undo of its forward stands (write.go, unforward).
--
-- Any other call under an operation id records that it was refused and
-- applied nothing (REFUSED): the later calls of its batch may be applied
-- and recorded, and a batch sent again under the id finds this call's tag
-- here, in the first call's field, which the others check. Without it, the
-- id sent again for the items in another order, or cut into calls another
-- way (an rbloom of another call size), applied the calls that found no
-- record, some of their items a second time. Sent again as it was, this
-- call is applied then. The record holds the partition's incarnation, so
-- a call that may create its partition and finds none (missing: the
-- partition's key, f, header and TTL) creates it, empty, first: another
-- call creating it afterwards, of this batch or another process's, would
-- give it another incarnation, in which the mark is not found.
local function full(create, rec, field, tag, inc, keep, why, missing)
  if create == 'f' then
    remember(rec, field, tag, inc, 'F' .. why, keep)
  elseif tag ~= '' then
    if missing then createEmpty(missing.key, missing.f, missing.head, missing.ttl) end
    storeRecord(rec, field, tag, inc .. REFUSED .. tag, keep)
  end
  return reject('FULL', why)
end

-- build appends op <type> <offset> value to args for each offset in
-- a[first..last], from args[j + 1] on, checking that the offset is the
-- first bit of a slot: in [lo, hi], a multiple of w. It returns nil, or
-- the index in ARGV of the first offset that is not. Arithmetic on an
-- argument that is not a number raises an error, which slots catches.
-- Offsets Lua reads but BITFIELD would not ("0x200", " 512") make the
-- BITFIELD call itself fail, before it writes anything.
--
-- This loop is the hot path of every write. "s + 0" reads the number with
-- one strtod; tonumber(s) is a function call that reads it twice.
local function build(args, a, j, first, last, lo, hi, w, op, typ, value)
  for i = first, last do
    local s = a[i]
    local o = s + 0
    if o < lo or o > hi or o % w ~= 0 then return i end
    args[j + 1] = op
    args[j + 2] = typ
    args[j + 3] = s
    args[j + 4] = value
    j = j + 4
  end
  return nil
end

-- canonical returns the index in argv of the first offset from first on
-- that is not written as BITFIELD reads it (decimal digits, no sign, no
-- leading zero: "0x200" and " 512" are numbers to Lua, not to BITFIELD),
-- or nil. slots has checked that they are numbers. Offsets are below 2^33,
-- which tostring writes in full.
local function canonical(argv, first)
  for i = first, #argv do
    local s = argv[i]
    if tostring(s + 0) ~= s then return i end
  end
  return nil
end

-- present reports whether the slots first..last of offsets are all
-- non-zero: now[offset] where an earlier item of the same call changed it,
-- else v[t], as read at the start of the call (nil: a key that does not
-- exist).
local function present(offsets, v, now, first, last)
  for t = first, last do
    local c = now[offsets[t]] or v[t]
    if not c or c == 0 then return false end
  end
  return true
end

-- slots checks argv[first..], the bit offsets of k slots per item, and
-- returns the arguments of the one BITFIELD call that applies them, and the
-- number of items; or nil, nil and an error reply. The call starts by changing
-- the item count kept in the header (at ITEMS_BIT) by 0, which the caller sets,
-- under OVERFLOW SAT, which the caller may change; then comes op <type>
-- <offset> value for each slot. Every offset must be the first bit of one of
-- the m slots, so that BITFIELD can never grow the string or touch the
-- header.
--
-- The client sends one argument per slot rather than the four BITFIELD
-- takes: Redis turns every argument into a Lua string before the script
-- starts, and that costs more than adding the other three here.
local function slots(f, argv, first, op, value)
  local last = #argv
  local count = last - first + 1
  if count > MAX_SLOTS or count % f.k ~= 0 then
    return nil, nil, reject('ARGS', count .. ' slot offsets: not a multiple of k = ' .. f.k ..
      ' up to ' .. MAX_SLOTS)
  end
  local w = f.width
  local lo = HEADER * 8
  local args = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', ITEMS_BIT, 0}
  local ok, bad = pcall(build, args, argv, #args, first, last, lo, lo + (f.m - 1) * w, w,
    op, (w == 4) and 'u4' or 'u1', value)
  if not ok then
    return nil, nil, reject('ARGS', 'ARGV[' .. first .. '..' .. last .. '] are not all numbers')
  end
  if bad then
    return nil, nil, reject('ARGS', 'ARGV[' .. bad .. '] is not the bit offset of a slot')
  end
  return args, count / f.k
end
