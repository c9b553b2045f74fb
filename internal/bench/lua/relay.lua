-- relay.lua: BOUND for the benchmark only; rbloom does not use it.
--
-- The least a script can do for a batch of adds, sent the way rbloom sends
-- them (one argument per slot, since Redis turns each argument into a Lua
-- string before the script starts): add the other three arguments of each
-- INCRBY and make one BITFIELD call, with no check at all. The row shows how
-- close to the plain limit a script-based design can come on this server,
-- and how much of the rest rbloom's checks cost.
--
-- KEYS[1]   the key
-- ARGV      the bit offsets of k slots per item
-- Returns   the number of BITFIELD replies

local args, j = {'OVERFLOW', 'SAT'}, 2
for i = 1, #ARGV do
  args[j + 1] = 'INCRBY'
  args[j + 2] = 'u4'
  args[j + 3] = ARGV[i]
  args[j + 4] = '1'
  j = j + 4
end
return #redis.call('BITFIELD', KEYS[1], unpack(args))
