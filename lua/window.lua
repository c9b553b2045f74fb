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

local done, err = replay(gens + 1, field, tag)
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
local bitfield, n
bitfield, n, err = slots(f, ARGV, FIRST_OFFSET, 'SET', '1')
if err then return err end
if not live[1] then
  local bad = canonical(ARGV, FIRST_OFFSET)
  if bad then return reject('ARGS', 'ARGV[' .. bad .. '] is not a decimal offset') end
end

-- Read every event's bits in every live generation.
local offsets = {unpack(ARGV, FIRST_OFFSET)}
local get = {}
for t = 1, #offsets do
  get[#get + 1] = 'GET'
  get[#get + 1] = 'u1'
  get[#get + 1] = offsets[t]
end
local bits = {} -- KEYS index -> the bits read there
for g = 1, gens do
  if live[g] and #offsets > 0 then bits[g] = redis.call('BITFIELD_RO', KEYS[g], unpack(get)) end
end

local now = {} -- offset -> 1 once an earlier event of this call set it
local none = {}
local add = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', ITEMS_BIT, 0}
local out, added, k = {}, 0, f.k
for i = 1, n do
  local first, last = (i - 1) * k + 1, i * k
  local seen = present(offsets, bits[1] or none, now, first, last)
  for g = 2, gens do
    if seen then break end
    if bits[g] then seen = present(offsets, bits[g], none, first, last) end
  end
  out[i] = seen and '1' or '0'
  if not seen then
    added = added + 1
    for t = first, last do
      local o = offsets[t]
      now[o] = 1
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
remember(record, field, tag, res, keep)
return res
