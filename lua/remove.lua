-- remove.lua: remove items from a counting filter. Each call is atomic. An
-- item is removed only if all k of its counters are non-zero; then each of
-- them is decremented, except a counter at 15: it has saturated, its true
-- count is unknown, and it stays at 15 for good. Items are removed in order,
-- each seeing the counters as the ones before it left them.
--
-- KEYS[1]   the filter's key; a missing key is an empty filter (not created)
-- KEYS[2]   this call's operation key, as in add.lua
-- ARGV[1]   the filter's 64-byte header (only compared, never written)
-- ARGV[2]   how long KEYS[2] is kept, in ms
-- ARGV[3..] k groups per item, one per counter: 'GET' 'u4' <bit offset>
-- Returns   one character per item: '1' removed, '0' definitely absent
--           (nothing changed).

local done = redis.call('GET', KEYS[2])
if done then return done end

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if f.mode ~= 'c' then return reject('ARGS', 'remove needs a counting filter') end
local keep = int(ARGV[2], 1, 2^50)
if not keep then return reject('ARGS', 'ARGV[2] is not a duration in ms') end
local exists, err = open(KEYS[1], f, ARGV[1])
if err then return err end
local n
n, err = slots(f, 3, 'GET', 'u4', nil)
if not n then return err end
if not exists then return string.rep('0', n) end

local v = redis.call('BITFIELD_RO', KEYS[1], unpack(ARGV, 3))
local now = {} -- offset -> counter after the removals earlier in this call
local dec = {'OVERFLOW', 'SAT', 'INCRBY', 'i64', 192, 0}
local out, removed = {}, 0
for i = 1, n do
  local first, last = (i - 1) * f.k + 1, i * f.k
  local present = true
  for t = first, last do
    if (now[ARGV[3 * t + 2]] or v[t]) == 0 then present = false break end
  end
  out[i] = present and '1' or '0'
  if present then
    removed = removed + 1
    for t = first, last do
      local o = ARGV[3 * t + 2]
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
local res = table.concat(out)
if removed > 0 then
  dec[6] = -removed
  redis.call('BITFIELD', KEYS[1], unpack(dec))
  redis.call('SET', KEYS[2], res, 'PX', keep)
end
return res
