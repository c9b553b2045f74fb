-- window.lua: test-or-add events in a window of generations, atomically.
-- A window keeps one classic filter per time bucket, a generation, for
-- each partition; all the generations of a partition share its hash slot.
-- An event was seen when all its k bits are set in any live generation;
-- an event not seen is added to the current one. Events are taken in
-- order, each seeing the ones before it in this call.
--
-- KEYS[1]   the current generation: unseen events are added to it
-- KEYS[2..] the other live generations, only read (the next bucket's
--           among them, for clients whose clocks run a bucket ahead); each
--           generation's key ends in ':g:' and its bucket's number
-- KEYS[g+1] the window's settings in this partition's slot, a hash: field
--           's' holds ARGV[6]; a field named after a bucket's number says
--           that the generation of that bucket was created, so that one
--           that vanished is told from one never written
-- KEYS[g+2..] the hashes of this call's record, as in add.lua: one, or
--           ONCE_RECORD_KEYS under an operation id
-- ARGV[1]   the generations' 64-byte header (classic)
-- ARGV[2]   TTL in ms given to the current generation when this call
--           creates it
-- ARGV[3]   the TTL in ms a record hash gets from its first record
-- ARGV[4]   the record's field, as in add.lua
-- ARGV[5]   the record's tag, as in add.lua
-- ARGV[6]   the window's settings: ARGV[1], then its bucket and span
-- ARGV[7]   '1' if this call may create the current generation, '0' if
--           not: the client creates the generation of a bucket in every
--           partition together, as a filter's partitions are
-- ARGV[8..] the bit offsets of each event's k bits, in decimal
-- Returns   one character per event: '1' seen (not added), '0' new
--           (added); '?' when the current generation does not exist and
--           ARGV[7] is '0' (nothing written). Fails with RBLOOM_MISMATCH
--           when the stored settings are not ARGV[6], and RBLOOM_DAMAGED
--           when a generation the settings say was created is missing:
--           its events must not be answered new.

local field, tag, settingsArg, create = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local FIRST_OFFSET = 8
-- KEYS[1..gens] are generations, then the settings, then the record.
local gens = #KEYS - 1 - ((tag == '') and 1 or ONCE_RECORD_KEYS)
if gens < 1 then return reject('ARGS', 'no generation among ' .. #KEYS .. ' keys') end
local current, settings, record = KEYS[1], KEYS[gens + 1], KEYS[gens + 2]

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if f.mode ~= 'b' then return reject('ARGS', 'a window holds classic generations') end
local ttl = int(ARGV[2], 1, 2^50)
local keep = int(ARGV[3], 1, 2^50)
if not ttl or not keep then return reject('ARGS', 'ARGV[2] or ARGV[3] is not a duration in ms') end
if #settingsArg <= HEADER or string.sub(settingsArg, 1, HEADER) ~= ARGV[1] then
  return reject('ARGS', 'ARGV[6] does not start with ARGV[1]')
end
if create ~= '0' and create ~= '1' then return reject('ARGS', 'ARGV[7] is not 0 or 1') end
-- A handle with other settings is refused before anything else, replays
-- included: it would look for records and generations elsewhere.
local stored = redis.call('HGET', settings, 's')
if stored and stored ~= settingsArg then
  return reject('MISMATCH', settings .. ' holds other settings than this handle\'s (partitions, events per bucket, error rate, id lifetime, bucket or span)')
end
local done, err = replay(gens + 2, field, tag, '')
if err then return err end
if done then return done end
local bucket = {} -- each generation's bucket number, from its key
for g = 1, gens do
  bucket[g] = string.match(KEYS[g], ':g:(%-?%d+)$')
  if not bucket[g] then return reject('ARGS', KEYS[g] .. ' is not the key of a generation') end
end
local live = {} -- the generations that exist, KEYS index -> true
for g = 1, gens do
  local exists, _, openErr = open(KEYS[g], f)
  if openErr then return openErr end
  live[g] = exists
end
local _, n -- the BITFIELD arguments slots builds are not used: its checks are
_, n, err = slots(f, ARGV, FIRST_OFFSET, 'SET', '1')
if err then return err end
if not live[1] then
  local bad = canonical(ARGV, FIRST_OFFSET)
  if bad then return reject('ARGS', 'ARGV[' .. bad .. '] is not a decimal offset') end
end
-- Which generations were created, asked 1000 at a time (unpack has a
-- limit, and a span may have 10,000 buckets).
for lo = 1, gens, 1000 do
  local hi = math.min(gens, lo + 999)
  local created = redis.call('HMGET', settings, unpack(bucket, lo, hi))
  for g = lo, hi do
    if not live[g] and created[g - lo + 1] then
      return reject('DAMAGED', KEYS[g] .. ' was created and is gone: its events cannot be told from new ones')
    end
  end
end
if not live[1] and create == '0' then return '?' end
if not stored then
  -- The first call of this window here, or one of a version that kept no
  -- settings: its live generations become known as created.
  redis.call('HSET', settings, 's', settingsArg)
  for g = 1, gens do
    if live[g] then redis.call('HSET', settings, bucket[g], '1') end
  end
end
if not live[1] then
  -- Created with the other partitions' (the client's create calls), even
  -- when no event of this call is new, and known as created from now on.
  redis.call('SETRANGE', current, f.size - 1, '\0')
  redis.call('SETRANGE', current, 0, ARGV[1])
  redis.call('PEXPIRE', current, ttl)
  redis.call('HSET', settings, bucket[1], '1')
  -- Forget the generations older than any a call still reads.
  local oldest = tonumber(bucket[1]) - gens
  for _, b in ipairs(redis.call('HKEYS', settings)) do
    local v = tonumber(b)
    if v and v < oldest then redis.call('HDEL', settings, b) end
  end
  live[1] = true
end

local offsets = {unpack(ARGV, FIRST_OFFSET)} -- event i's slot t: offsets[(i - 1) * k + t]
local k = f.k

-- allSet returns the events of list whose k bits are all set in the
-- generation at key. It reads slot by slot, one BITFIELD_RO a round for
-- the events whose bits read so far are all 1, so a new event costs about
-- two bits a generation (a generation is at most half full), not k. When
-- zeroAt is given, it records there each other event's first 0 slot.
local function allSet(key, list, zeroAt)
  local left = list
  for t = 1, k do
    if #left == 0 then break end
    local get = {}
    for j = 1, #left do
      get[3 * j - 2], get[3 * j - 1], get[3 * j] = 'GET', 'u1', offsets[(left[j] - 1) * k + t]
    end
    local bits = redis.call('BITFIELD_RO', key, unpack(get))
    local ones = {}
    for j = 1, #left do
      if bits[j] == 1 then ones[#ones + 1] = left[j]
      elseif zeroAt then zeroAt[left[j]] = t end
    end
    left = ones
  end
  return left
end

-- Which events were seen before this call: the current generation first,
-- then the others, each asked only about the events not seen yet.
local seenBefore, zeroAt, rest = {}, {}, {}
for i = 1, n do rest[i] = i end
for g = 1, gens do
  if live[g] and #rest > 0 then
    local set = allSet(KEYS[g], rest, (g == 1) and zeroAt or nil)
    if #set > 0 then
      for _, i in ipairs(set) do seenBefore[i] = true end
      local left = {}
      for _, i in ipairs(rest) do
        if not seenBefore[i] then left[#left + 1] = i end
      end
      rest = left
    end
  end
end

-- setNow reports whether event i's bits are all set in the current
-- generation once the events before it in this call are added (now: the
-- offsets they set). Its first 0 slot, zeroAt[i], must be among them;
-- the bits after it were not read, and are read here (an event repeated
-- within a call, or one whose bits earlier events happen to cover).
local function setNow(i, now)
  local base, z = (i - 1) * k, zeroAt[i]
  if live[1] and not now[offsets[base + z]] then return false end
  local get = {}
  for t = 1, k do
    local o = offsets[base + t]
    if not now[o] then
      if not live[1] then return false end
      if t > z then
        get[#get + 1] = 'GET'
        get[#get + 1] = 'u1'
        get[#get + 1] = o
      end
    end
  end
  if #get == 0 then return true end
  for _, bit in ipairs(redis.call('BITFIELD_RO', current, unpack(get))) do
    if bit == 0 then return false end
  end
  return true
end

local now = {} -- offset -> true once an earlier event of this call set it
local add = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', ITEMS_BIT, 0}
local out, added = {}, 0
for i = 1, n do
  local seen = seenBefore[i] or setNow(i, now)
  out[i] = seen and '1' or '0'
  if not seen then
    added = added + 1
    for t = (i - 1) * k + 1, i * k do
      local o = offsets[t]
      now[o] = true
      add[#add + 1] = 'SET'
      add[#add + 1] = 'u1'
      add[#add + 1] = o
      add[#add + 1] = 1
    end
  end
end

if added > 0 then
  add[BF_ITEMS] = added
  redis.call('BITFIELD', current, unpack(add))
end
local res = table.concat(out)
remember(record, field, tag, '', res, keep)
return res
