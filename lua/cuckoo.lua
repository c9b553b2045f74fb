-- cuckoo.lua: insert items into a cuckoo filter partition, or delete them
-- from it (cuckoo.go). Each call is atomic, and writes only at its end, in
-- one BITFIELD: an insert that cannot place its item (the planned load
-- reached, or CUCKOO_KICKS kicks without a free slot) fails the whole call
-- with RBLOOM_FULL having written nothing but, after a forward (ARGV[4]
-- 'f') or under an operation id, the record of its refusal (see full in
-- filter.lua), so every fingerprint it kicked stays where it was. An
-- insert creates a missing partition only when ARGV[4] is '1'.
--
-- The partition: the 64-byte header (header.go, mode 'k', k = f the
-- fingerprint width, m the number of buckets), then m buckets of
-- CUCKOO_BUCKET fingerprints of f bits each; bucket b is the unsigned
-- integer of 4f bits at bit HEADER*8 + b*4f, its first fingerprint in the
-- high bits. A fingerprint is 1 to 2^f - 1; 0 is an empty slot. An item
-- with fingerprint fp and first bucket b1 lives in b1 or in
-- b2 = (fp * CUCKOO_MIX mod m - b1) mod m, and the alternate of either is
-- the other, so that any m works.
--
-- KEYS[1]   the partition's key
-- KEYS[2]   the partition's copy being rebuilt: inserts go to it too while
--           KEYS[1]'s header says so (deletes never do), as in add.lua
-- KEYS[3..] the hashes of this call's record, as in add.lua
-- ARGV[1]   the partition's 64-byte header, as in add.lua
-- ARGV[2]   TTL in ms given to a partition this call creates, 0 for none
-- ARGV[3]   the TTL in ms a record hash gets from its first record
-- ARGV[4]   '1', '0', 'f' or 'r' and answers, as in add.lua ('0' for a delete)
-- ARGV[5]   the most items the partition may hold after this call, 0 for
--           no bound (Options.MaxItems); the planned load,
--           CUCKOO_MAX_LOAD of the 4m slots, bounds it anyway
-- ARGV[6]   the record's field, as in add.lua
-- ARGV[7]   the record's tag, as in add.lua
-- ARGV[8]   '1' to insert only the items not present (TestOrAdd), '0' to
--           insert every one (another copy of an item present); while
--           KEYS[1] is being loaded, '1' is refused with RBLOOM_LOADING and
--           an insert answers '1' for every item, as in add.lua
-- ARGV[9]   'a' insert, 'd' delete
-- ARGV[10..] per item, its first bucket b1 (0 to m-1) and its fingerprint
--           (1 to 2^f - 1), in decimal; at most CUCKOO_ITEMS items
-- Returns   one character per item: for an insert '1' if the fingerprint
--           was in b1 or b2 before (it may already have been present), '0'
--           otherwise, preceded by '+' when this call created the
--           partition; for a delete '1' if one copy of the fingerprint was
--           taken out, '0' if none was there (nothing changed). '?' when
--           KEYS[1] does not exist and may not be created (a delete never
--           creates it), or the batch's first call left no record
--           (firstMissing in filter.lua): nothing written. '!' and a
--           header as add.lua's, during a resize.

local key, copyKey, record = KEYS[1], KEYS[2], KEYS[3]
local field, tag, onlyAbsent, op = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local FIRST = 10

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if f.mode ~= 'k' then return reject('ARGS', 'cuckoo.lua needs a cuckoo filter, not ' .. f.modeName) end
local a, bad = addArgs(ARGV)
if not a then return bad end
local ttl, keep, limit, create = a.ttl, a.keep, a.limit, a.create
if op ~= 'a' and op ~= 'd' then return reject('ARGS', 'ARGV[9] is not a or d') end
if op == 'd' and (create == '1' or create == 'r') then return reject('ARGS', 'a delete never creates the partition nor records only') end

local m, fpBits = f.m, f.k
local FP = 2 ^ fpBits -- fingerprints are 1 .. FP-1
local W = f.width -- bits per bucket
local TYPE = 'u' .. W
local BASE = HEADER * 8
local cap = math.floor(CUCKOO_MAX_LOAD * CUCKOO_BUCKET * m)
if limit > 0 and limit < cap then cap = limit end

-- The items: b1[i], fps[i]. Every one is checked before anything is read
-- or written.
local count = #ARGV - FIRST + 1
if count % 2 ~= 0 or count > 2 * CUCKOO_ITEMS then
  return reject('ARGS', count .. ' item arguments: want a bucket and a fingerprint per item, up to ' .. CUCKOO_ITEMS .. ' items')
end
local n = count / 2
local b1, fps = {}, {}
local argv = ARGV
for i = 1, n do
  -- int's checks, inline: a call makes 2 an item.
  local b, fp = tonumber(argv[FIRST + 2 * i - 2]), tonumber(argv[FIRST + 2 * i - 1])
  if not (b and fp and b % 1 == 0 and fp % 1 == 0 and b >= 0 and b < m and fp >= 1 and fp < FP) then
    return reject('ARGS', 'item ' .. i .. ': want a bucket in 0..' .. (m - 1) .. ' and a fingerprint in 1..' .. (FP - 1))
  end
  b1[i], fps[i] = b, fp
end
-- b2s[i] is item i's other bucket (alt, below).
local b2s = {}

local exists, head, err = open(key, f)
if err then return err end
if not exists and create ~= '1' then return REPLY_MISSING end
local inc = incarnation(head or ARGV[1])
local done, cut
done, err, cut = replay(3, field, tag, inc)
if err then return err end
if done then return done end
if create == 'r' then return recordOnly(record, field, tag, inc, a.answers, n, keep) end
if cut then return FIRST_MISSING end
local copy
if op == 'a' then
  copy, err = copyOf(head, f, copyKey)
  if err then return err end
end
local loads = loading(head)
if loads and op == 'a' and onlyAbsent == '1' then
  return reject('LOADING', key .. ' is being loaded: whether an item is absent is not known yet')
end
if exists and n == 0 then return '' end -- nothing to do, nothing to record
if exists and op == 'a' and create ~= 'f' then
  local target = resizing(head, copyKey)
  if target then return REPLY_FORWARD .. target end
end

-- alt returns the other bucket of a fingerprint in bucket b. The product
-- is below 2^13 * 2^31, exact in a double, and so is every % here.
local function alt(b, fp)
  return ((fp * CUCKOO_MIX) % m - b) % m
end

-- A store is a partition as this call sees it: the buckets read so far,
-- each kept as its integer of CUCKOO_BUCKET fingerprints (a number, not a
-- table: a table made and keyed per bucket cost more than the rest of an
-- insert), the buckets changed, in order and perhaps more than once, and
-- its item count. Nothing reaches Redis until flush.
local function store(k, headOf)
  return {key = k, buckets = {}, dirty = {}, nd = 0, items = itemsOf(headOf), added = 0}
end

-- PW[t] is the weight of slot t's fingerprint in its bucket's integer:
-- slot 1 is in the high bits.
local PW = {}
for t = 1, CUCKOO_BUCKET do PW[t] = FP ^ (CUCKOO_BUCKET - t) end
-- Offsets and values go to BITFIELD as strings: Redis turns a Lua number
-- into one with %.17g, several times slower.
local fmt = string.format

-- load reads the buckets bs into s with one BITFIELD_RO (a missing key
-- reads as zeros).
local function load(s, bs)
  local buckets, get, want, nw = s.buckets, {}, {}, 0
  for _, b in ipairs(bs) do
    if not buckets[b] then
      buckets[b] = 0 -- asked for (0 is a number: true to Lua), read below
      nw = nw + 1
      want[nw] = b
      get[3 * nw - 2], get[3 * nw - 1], get[3 * nw] = 'GET', TYPE, fmt('%d', BASE + b * W)
    end
  end
  if nw == 0 then return end
  local r = redis.call('BITFIELD_RO', s.key, unpack(get))
  for j = 1, nw do buckets[want[j]] = r[j] end
end

local function bucket(s, b)
  if not s.buckets[b] then load(s, {b}) end
  return s.buckets[b]
end

-- set puts fp in slot t of bucket b, which held old there.
local function set(s, b, t, old, fp)
  s.buckets[b] = s.buckets[b] + (fp - old) * PW[t]
  s.nd = s.nd + 1
  s.dirty[s.nd] = b
end

-- slotOf returns a slot of bucket b that holds fp, or nil.
local function slotOf(s, b, fp)
  local v = bucket(s, b)
  for t = CUCKOO_BUCKET, 1, -1 do
    local x = v % FP
    if x == fp then return t end
    v = (v - x) / FP
  end
  return nil
end

-- scan returns a slot of bucket b that holds fp and a free one, each or
-- nil, in one pass over its fingerprints.
local function scan(s, b, fp)
  local v = bucket(s, b)
  local at, free
  for t = CUCKOO_BUCKET, 1, -1 do
    local x = v % FP
    if x == fp then at = t elseif x == 0 then free = t end
    v = (v - x) / FP
  end
  return at, free
end

-- put stores fp in a free slot of bucket b, and reports whether it could.
local function put(s, b, fp)
  local t = slotOf(s, b, 0)
  if not t then return false end
  set(s, b, t, 0, fp)
  return true
end

-- insert places fp, whose buckets are b and b2 with free slots free1 and
-- free2 (from scan: nil for none), kicking fingerprints on to their other
-- bucket, at most CUCKOO_KICKS times. It returns nil, or why it could
-- not: the call then fails and writes nothing.
local function insert(s, b, b2, fp, free1, free2)
  if s.items + s.added + 1 > cap then
    return s.key .. ' holds ' .. (s.items + s.added) .. ' items, its planned most (load ' .. CUCKOO_MAX_LOAD .. ' or MaxItems)'
  end
  if free1 or free2 then
    if free1 then set(s, b, free1, 0, fp) else set(s, b2, free2, 0, fp) end
    s.added = s.added + 1
    return nil
  end
  -- Both full. Of the same fingerprint only: kicking cannot help.
  local only = 0
  for t = 1, CUCKOO_BUCKET do only = only + fp * PW[t] end
  if bucket(s, b) == only and bucket(s, b2) == only then
    return s.key .. ': both buckets of the item hold its fingerprint only'
  end
  -- A walk: fp must go into b, which is full. Each step first looks one
  -- step ahead, reading the other buckets of b's fingerprints in one
  -- BITFIELD_RO: if one has a free slot, that fingerprint moves there and
  -- fp takes its place. Otherwise a fingerprint of b is kicked out for fp
  -- and must go into its other bucket, full too: the next step. The slot
  -- kicked comes from a small linear congruential sequence seeded by the
  -- item (no randomness in scripts: the walk is deterministic).
  local seed = (fp + b) % 65537
  if seed % 2 == 1 then b = b2 end
  for _ = 1, CUCKOO_KICKS do
    local v = bucket(s, b)
    local fpsIn, alts = {}, {}
    for t = CUCKOO_BUCKET, 1, -1 do
      local x = v % FP
      fpsIn[t], alts[t] = x, alt(b, x)
      v = (v - x) / FP
    end
    load(s, alts)
    for t = 1, CUCKOO_BUCKET do
      if alts[t] ~= b and put(s, alts[t], fpsIn[t]) then
        set(s, b, t, fpsIn[t], fp)
        s.added = s.added + 1
        return nil
      end
    end
    seed = (seed * 75 + 74) % 65537
    local t = seed % CUCKOO_BUCKET + 1
    set(s, b, t, fpsIn[t], fp)
    fp, b = fpsIn[t], alts[t]
  end
  return s.key .. ': no free slot after ' .. CUCKOO_KICKS .. ' kicks'
end

-- remove takes one copy of fp out of bucket b or b2, and reports whether
-- there was one.
local function remove(s, b, b2, fp)
  local t = slotOf(s, b, fp)
  if not t then
    b = b2
    t = slotOf(s, b, fp)
    if not t then return false end
  end
  set(s, b, t, fp, 0)
  s.added = s.added - 1
  return true
end

-- flush writes the changed buckets of s (a bucket changed twice is
-- written twice, with its last value), and its item count, in BITFIELD
-- calls of at most 500 buckets (unpack's limit is about 8000 arguments).
local function flush(s)
  local args, na = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', ITEMS_BYTE * 8, s.added}, 6
  for i = 1, s.nd do
    local b = s.dirty[i]
    args[na + 1], args[na + 2], args[na + 3], args[na + 4] = 'SET', TYPE, fmt('%d', BASE + b * W), fmt('%d', s.buckets[b])
    na = na + 4
    if na >= 2000 then
      redis.call('BITFIELD', s.key, unpack(args, 1, na))
      args, na = {}, 0
    end
  end
  if na > 0 then redis.call('BITFIELD', s.key, unpack(args, 1, na)) end
end

local main = store(key, head or ARGV[1])
local other
if copy then other = store(copy, redis.call('GETRANGE', copy, 0, HEADER - 1)) end
local firsts = {}
for i = 1, n do
  b2s[i] = alt(b1[i], fps[i])
  firsts[2 * i - 1], firsts[2 * i] = b1[i], b2s[i]
end
if exists then load(main, firsts) else
  for _, b in ipairs(firsts) do main.buckets[b] = 0 end
end

local out = {}
for i = 1, n do
  local b, b2, fp = b1[i], b2s[i], fps[i]
  if op == 'd' then
    out[i] = remove(main, b, b2, fp) and '1' or '0'
  else
    local at1, free1 = scan(main, b, fp)
    local at2, free2 = scan(main, b2, fp)
    local seen = at1 or at2
    out[i] = (seen or loads) and '1' or '0'
    if not (seen and onlyAbsent == '1') then
      local why = insert(main, b, b2, fp, free1, free2)
      if not why and other then
        local _, o1 = scan(other, b, fp)
        local _, o2 = scan(other, b2, fp)
        why = insert(other, b, b2, fp, o1, o2)
      end
      if why then
        local missing = (not exists) and {key = key, f = f, head = ARGV[1], ttl = ttl} or nil
        return full(create, record, field, tag, inc, keep, why, missing)
      end
    end
  end
end

if not exists then createEmpty(key, f, ARGV[1], ttl) end
flush(main)
if other then flush(other) end
local res = table.concat(out)
if not exists then res = REPLY_CREATED .. res end
remember(record, field, tag, inc, res, keep)
return res
