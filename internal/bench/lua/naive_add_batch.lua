-- naive_add_batch.lua: BASELINE for the benchmark only; rbloom does not use
-- it.
--
-- naive_add.lua for many items per call: the item loop moved into Lua, one
-- BITFIELD per item, arguments built in Lua one table insert at a time.
--
-- KEYS[1]   the key
-- ARGV[1]   k
-- ARGV[2..] k slot indices per item
-- Returns   one integer per item: 1 if all its k counters were non-zero
--           before, 0 otherwise

local k = tonumber(ARGV[1])
local out = {}
for first = 2, #ARGV, k do
  local args = {'OVERFLOW', 'SAT'}
  for i = first, first + k - 1 do
    args[#args + 1] = 'INCRBY'
    args[#args + 1] = 'u4'
    args[#args + 1] = 512 + 4 * tonumber(ARGV[i])
    args[#args + 1] = 1
  end
  local r = redis.call('BITFIELD', KEYS[1], unpack(args))
  local seen = 1
  for i = 1, #r do
    if r[i] == 1 then seen = 0 end
  end
  out[#out + 1] = seen
end
return out
