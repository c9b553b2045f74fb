-- window.lua: test-or-add events in a window of generations, atomically.
-- A window keeps one classic filter per time bucket, a generation, for
-- each partition; all the generations of a partition share its hash slot.
-- An event was seen when all its k bits are set in any live generation;
-- an event not seen is added to the current one. Events are taken in
-- order, each seeing the ones before it in this call.
--
-- KEYS[1]   the current generation: unseen events are added to it, and a
--           call creates it when it is missing
-- KEYS[2..] the other live generations, only read (the next bucket's
--           among them, for clients whose clocks run a bucket ahead); then
--           the hashes of this call's record, as in add.lua: the last one,
--           or the last ONCE_RECORD_KEYS under an operation id
-- ARGV[1]   the generations' 64-byte header (classic)
-- ARGV[2]   TTL in ms given to the current generation when this call
--           creates it
-- ARGV[3]   the TTL in ms a record hash gets from its first record
-- ARGV[4]   the record's field, as in add.lua
-- ARGV[5]   the record's tag, as in add.lua
-- ARGV[6..] the bit offsets of each event's k bits, in decimal
-- Returns   one character per event: '1' seen (not added), '0' new (added)

local field, tag = ARGV[4], ARGV[5]
local FIRST_OFFSET = 6
-- KEYS[1..gens] are generations, KEYS[gens + 1..] the record's hashes.
local gens = #KEYS - ((tag == '') and 1 or ONCE_RECORD_KEYS)
if gens < 1 then return reject('ARGS', 'no generation among ' .. #KEYS .. ' keys') end
local current, record = KEYS[1], KEYS[gens + 1]

local done, err = replay(gens + 1, field, tag, '')
if err then return err end
if done then return done end

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if f.mode ~= 'b' then return reject('ARGS', 'a window holds classic generations') end
local ttl = int(ARGV[2], 1, 2^50)
local keep = int(ARGV[3], 1, 2^50)
if not ttl or not keep then return reject('ARGS', 'ARGV[2] or ARGV[3] is not a duration in ms') end
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

if not live[1] and added > 0 then
  redis.call('SETRANGE', current, f.size - 1, '\0')
end
if added > 0 then
  add[BF_ITEMS] = added
  redis.call('BITFIELD', current, unpack(add))
end
if not live[1] and added > 0 then
  redis.call('SETRANGE', current, 0, string.sub(ARGV[1], 1, ITEMS_BYTE))
  redis.call('SETRANGE', current, ITEMS_BYTE + 8, string.sub(ARGV[1], ITEMS_BYTE + 9))
  redis.call('PEXPIRE', current, ttl)
end
local res = table.concat(out)
remember(record, field, tag, '', res, keep)
return res
