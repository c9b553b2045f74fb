-- add.lua: add items to a filter. Each call is atomic: every item's k slots
-- are incremented (counting) or set (classic) together. A call creates a
-- missing partition only when told to (Create, Options.CreateOnWrite).
--
-- KEYS[1]   the partition's key
-- KEYS[2]   the partition's copy being rebuilt (KEYS[1] .. ':next'); the
--           items are added to it too while KEYS[1]'s header says so
-- KEYS[3..] the hashes of this call's record, in the same hash slot: 1, or
--           ONCE_RECORD_KEYS under an operation id. The record keeps the
--           answer, so that a retry of the same call (go-redis re-sends a
--           script whose reply was lost) or a replay of the same operation
--           id returns it instead of adding twice (see replay in filter.lua)
-- ARGV[1]   the partition's 64-byte header; written if KEYS[1] is created,
--           with the incarnation it holds (random, chosen by the client)
-- ARGV[2]   TTL in ms given to a partition this call creates, 0 for none
-- ARGV[3]   the TTL in ms a record hash gets from its first record
-- ARGV[4]   '1' if this call may create KEYS[1], '0' if not (the client
--           creates the partitions of a filter together, so that one that
--           vanished alone is noticed rather than recreated empty); 'f' if
--           not, and the client has already added the items to the copies
--           of a resize (see below); 'r' and one answer per item ('0' or
--           '1') to record those answers and change nothing (see
--           recordOnly in filter.lua)
-- ARGV[5]   the most items the partition may hold after this call, 0 for
--           no bound: a call that would pass it adds nothing (after a
--           forward, ARGV[4] 'f', or under an operation id, it records
--           its refusal: see full in filter.lua)
-- ARGV[6]   the record's field (RECORD_FIELD bytes)
-- ARGV[7]   the record's tag: a digest of the items an operation id was
--           used for (RECORD_TAG bytes); empty for a call's random record
-- ARGV[8]   '1' to add only the items that test absent (each seeing the
--           slots the ones before it in this call set), '0' to add all;
--           while KEYS[1] is being loaded (MARK_LOAD), '1' is refused with
--           RBLOOM_LOADING, and '0' answers '1' for every item: whether
--           it was there is not known yet
-- ARGV[9..] the bit offsets of each item's k slots, in decimal, item after
--           item: a counter (u4) is incremented, saturating at 15, a bit
--           (u1) is set. None creates the partition and adds nothing.
-- Returns   one character per item: '1' if all its slots were non-zero
--           before (it may already have been present), '0' otherwise;
--           preceded by '+' when this call created the partition. '?' when
--           KEYS[1] does not exist and ARGV[4] is not '1', or the batch's
--           first call left no record (firstMissing in filter.lua):
--           nothing written.
--           '!' and the 64-byte header of the filter being resized into,
--           when a resize holds KEYS[1] (header byte MARK_BYTE = 2, the new
--           header at KEYS[2]) and ARGV[4] is not 'f': nothing written; the
--           client adds the items to the new filter's copies first, then
--           calls again with 'f' (rebuild.go).

local key, copyKey, record = KEYS[1], KEYS[2], KEYS[3]
local field, tag, onlyAbsent = ARGV[6], ARGV[7], ARGV[8]
local FIRST_OFFSET = 9

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if f.mode == 'k' then return reject('ARGS', 'a cuckoo filter takes cuckoo.lua') end
local a, bad = addArgs(ARGV)
if not a then return bad end
local ttl, keep, limit, create = a.ttl, a.keep, a.limit, a.create
local exists, head, err = open(key, f)
if err then return err end
local op, zero = 'INCRBY', 1 -- a counter at 0 comes back as 1
if f.mode == 'b' then op, zero = 'SET', 0 end -- SET returns the old bit
local bitfield, n
bitfield, n, err = slots(f, ARGV, FIRST_OFFSET, op, '1')
if err then return err end
if not exists and create ~= '1' then return REPLY_MISSING end
-- A partition this call creates gets the incarnation of ARGV[1].
local inc = incarnation(head or ARGV[1])
local done, cut
done, err, cut = replay(3, field, tag, inc)
if err then return err end
if done then return done end
if create == 'r' then return recordOnly(record, field, tag, inc, a.answers, n, keep) end
if cut then return FIRST_MISSING end
local copy
copy, err = copyOf(head, f, copyKey)
if err then return err end
local loads = loading(head)
if loads and onlyAbsent == '1' then
  return reject('LOADING', key .. ' is being loaded: whether an item is absent is not known yet')
end
if not exists then
  -- The creation below writes before BITFIELD, so BITFIELD must not be
  -- able to fail: it refuses offsets that Lua reads as numbers.
  local bad = canonical(ARGV, FIRST_OFFSET)
  if bad then return reject('ARGS', 'ARGV[' .. bad .. '] is not a decimal offset') end
end
if exists and n == 0 then return '' end -- nothing to add, nothing to record

-- absent reads every slot of the items and returns the answers, the
-- BITFIELD arguments that add those that test absent, and how many those
-- are. Each item sees the slots the ones before it set, as in a run of
-- single adds. It only reads: a missing key reads as zeros.
local function absent()
  local offsets = {unpack(ARGV, FIRST_OFFSET)}
  local typ = (f.width == 4) and 'u4' or 'u1'
  local get = {}
  for t = 1, #offsets do
    get[#get + 1] = 'GET'
    get[#get + 1] = typ
    get[#get + 1] = offsets[t]
  end
  local v = (#offsets > 0) and redis.call('BITFIELD_RO', key, unpack(get)) or {}
  local now = {} -- offset -> slot after the items before in this call
  local args = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', ITEMS_BIT, 0}
  local out, added, k = {}, 0, f.k
  for i = 1, n do
    local first, last = (i - 1) * k + 1, i * k
    local seen = present(offsets, v, now, first, last)
    out[i] = seen and '1' or '0'
    if not seen then
      added = added + 1
      for t = first, last do
        local o = offsets[t]
        now[o] = (now[o] or v[t]) + 1
        args[#args + 1] = op
        args[#args + 1] = typ
        args[#args + 1] = o
        args[#args + 1] = 1
      end
    end
  end
  args[BF_ITEMS] = added
  return out, args, added
end

local out, adds = nil, n
if onlyAbsent == '1' then out, bitfield, adds = absent() end
if limit > 0 and adds > 0 and (exists and itemsOf(head) or 0) + adds > limit then
  local missing = (not exists) and {key = key, f = f, head = ARGV[1], ttl = ttl} or nil
  return full(create, record, field, tag, inc, keep, key .. ' would hold more than ' .. limit .. ' items', missing)
end
-- After the bound: an add refused with FULL must not reach the new filter.
if exists and create ~= 'f' then
  local target = resizing(head, copyKey)
  if target then return REPLY_FORWARD .. target end
end

if not exists then
  -- One SETRANGE at the last byte makes the string at its full length in
  -- one allocation; grown by BITFIELD, Redis would keep up to 1 MiB spare.
  redis.call('SETRANGE', key, f.size - 1, '\0')
end
-- The first reply is the item count kept in the header.
bitfield[BF_ITEMS] = adds
local r
if adds > 0 then -- else nothing changes (the count of a new partition is 0)
  r = redis.call('BITFIELD', key, unpack(bitfield))
  if copy then redis.call('BITFIELD', copy, unpack(bitfield)) end
end
if not exists then
  -- The item count (8 bytes from ITEMS_BYTE) is what BITFIELD has just
  -- set: write the header around it.
  redis.call('SETRANGE', key, 0, string.sub(ARGV[1], 1, ITEMS_BYTE))
  redis.call('SETRANGE', key, ITEMS_BYTE + 8, string.sub(ARGV[1], ITEMS_BYTE + 9))
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end

if loads then
  out = {string.rep('1', n)}
elseif not out then -- all were added: an item was there if none of its slots was zero
  local j, k = FIRST_SLOT_REPLY, f.k
  out = {}
  for i = 1, n do
    local seen = '1'
    for t = j, j + k - 1 do
      if r[t] == zero then seen = '0' end
    end
    out[i] = seen
    j = j + k
  end
end
local res = table.concat(out)
if not exists then res = REPLY_CREATED .. res end
remember(record, field, tag, inc, res, keep)
return res
