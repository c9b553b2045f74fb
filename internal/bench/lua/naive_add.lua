-- naive_add.lua: BASELINE for the benchmark only; rbloom does not use it.
--
-- The naive atomic add of one item to a counting filter: the client sends
-- the item's k slot indices and the script builds the BITFIELD arguments in
-- Lua, one table insert at a time. It checks nothing and keeps no header.
--
-- KEYS[1]   the key
-- ARGV[1..] the item's k slot indices
-- Returns   1 if all k counters were non-zero before, 0 otherwise

local args = {'OVERFLOW', 'SAT'}
for i = 1, #ARGV do
  args[#args + 1] = 'INCRBY'
  args[#args + 1] = 'u4'
  args[#args + 1] = 512 + 4 * tonumber(ARGV[i])
  args[#args + 1] = 1
end
local r = redis.call('BITFIELD', KEYS[1], unpack(args))
for i = 1, #r do
  if r[i] == 1 then return 0 end -- the counter was 0
end
return 1
