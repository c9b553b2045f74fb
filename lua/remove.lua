-- remove.lua: remove items from a counting filter. Each call is atomic. An
-- item is removed only if all k of its counters are non-zero; then each of
-- them is decremented, except a counter at 15: it has saturated, its true
-- count is unknown, and it stays at 15 for good. Items are removed in order,
-- each seeing the counters as the ones before it left them.
--
-- KEYS[1]   the partition's key
-- KEYS[2..] the hashes of this call's record, as in add.lua
--
-- A remove never touches the copy a rebuild fills (see rebuild.go): the
-- item may not be there, and its decrements would take counts of others.
-- ARGV[1]   the partition's 64-byte header (only compared, never written)
-- ARGV[2]   the TTL in ms a record hash gets from its first record
-- ARGV[3]   the record's field, as in add.lua
-- ARGV[4]   the record's tag, as in add.lua; the answer is recorded even
--           when nothing was removed, so that a re-sent call or a replay of
--           the operation id answers the same after the items were added
-- ARGV[5..] the bit offsets of each item's k counters, in decimal, item
--           after item
-- Returns   one character per item: '1' removed, '0' definitely absent
--           (nothing changed); '?' when KEYS[1] does not exist, or the
--           batch's first call left no record (firstMissing in filter.lua):
--           nothing written (the client tells a new filter from a damaged
--           one).

local key, record = KEYS[1], KEYS[2]
local field, tag = ARGV[3], ARGV[4]
local FIRST_OFFSET = 5

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if f.mode ~= 'c' then return reject('ARGS', 'remove needs a counting filter') end
local keep = int(ARGV[2], 1, 2^50)
if not keep then return reject('ARGS', 'ARGV[2] is not a duration in ms') end
local exists, head, err = open(key, f)
if err then return err end
local bitfield, n
bitfield, n, err = slots(f, ARGV, FIRST_OFFSET, 'INCRBY', '-1')
if err then return err end
if not exists then return REPLY_MISSING end
local inc = incarnation(head)
local done, cut
done, err, cut = replay(2, field, tag, inc)
if err then return err end
if done then return done end
if cut then return FIRST_MISSING end
local k, slotCount = f.k, n * f.k

-- removeFrom removes the items from the filter at key and returns its
-- answers and how many it removed.
local function removeFrom(key)
  -- Fast path, for the common case where every item is present and no
  -- counter is saturated: decrement everything in one call.
  -- OVERFLOW FAIL leaves a counter at 0 alone and answers nil (false in
  -- Lua); an answer of 14 means the counter was 15. Either sends us to the
  -- exact path.
  bitfield[BF_OVERFLOW], bitfield[BF_ITEMS] = 'FAIL', -n
  local r = redis.call('BITFIELD', key, unpack(bitfield))
  local exact = false
  for t = FIRST_SLOT_REPLY, FIRST_SLOT_REPLY + slotCount - 1 do
    local v = r[t]
    if v == false or v == 14 then exact = true break end
  end
  if not exact then return string.rep('1', n), n end

  -- Exact path: undo what the fast path applied, read the counters, and
  -- remove item by item. offsets[t] is slot t's offset, v[t] its counter.
  local offsets = {unpack(ARGV, FIRST_OFFSET)}
  local undo = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', ITEMS_BIT, n}
  local get = {}
  for t = 1, slotCount do
    local o = offsets[t]
    if r[FIRST_SLOT_REPLY + t - 1] ~= false then
      undo[#undo + 1] = 'INCRBY'
      undo[#undo + 1] = 'u4'
      undo[#undo + 1] = o
      undo[#undo + 1] = 1
    end
    get[#get + 1] = 'GET'
    get[#get + 1] = 'u4'
    get[#get + 1] = o
  end
  redis.call('BITFIELD', key, unpack(undo))
  local v = redis.call('BITFIELD_RO', key, unpack(get))

  local now = {} -- offset -> counter after the removals earlier in this call
  local dec = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', ITEMS_BIT, 0}
  local out, removed = {}, 0
  for i = 1, n do
    local first, last = (i - 1) * k + 1, i * k
    local seen = present(offsets, v, now, first, last)
    out[i] = seen and '1' or '0'
    if seen then
      removed = removed + 1
      for t = first, last do
        local o = offsets[t]
        local c = now[o] or v[t]
        -- c is 0 only when the item hits this counter more than once.
        if c > 0 and c < 15 then
          now[o] = c - 1
          dec[#dec + 1] = 'INCRBY'
          dec[#dec + 1] = 'u4'
          dec[#dec + 1] = o
          dec[#dec + 1] = -1
        end
      end
    end
  end
  if removed > 0 then
    dec[BF_ITEMS] = -removed
    redis.call('BITFIELD', key, unpack(dec))
  end
  return table.concat(out), removed
end

local res, removed = removeFrom(key)
-- Recorded even when nothing was removed: re-sent after an add of its
-- item, the call must answer "absent" again, not remove it.
remember(record, field, tag, inc, res, keep)
return res
