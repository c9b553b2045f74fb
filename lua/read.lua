#!lua flags=no-writes
-- read.lua: one partition's header, length and slots, read in one step.
-- Reads use it only when Redis refuses transactions (out of memory, where
-- a script that only reads still runs): in a plain pipeline, another
-- client could rename the key away and back between the header and the
-- slots, which would then read as zeros (read.go, sendReads). It writes
-- nothing, so it checks its arguments only so as to fail clearly.
--
-- KEYS[1]   the partition's key
-- ARGV[1]   how many bytes of header to read
-- ARGV[2..] BITFIELD_RO's arguments, GET <type> <offset> a slot, or none
-- Returns   {the header, the key's length (STRLEN), the slots' values};
--           the key's type error (WRONGTYPE) as it is

local key = KEYS[1]
local size = tonumber(ARGV[1])
if #KEYS ~= 1 or not size or size < 1 or size > 4096 or (#ARGV - 1) % 3 ~= 0 then
  return redis.error_reply('RBLOOM_' .. 'ARGS want one key, a header size and GET arguments')
end
local head = redis.pcall('GETRANGE', key, 0, size - 1)
if type(head) == 'table' then return head end
local vals = {}
if #ARGV > 1 then vals = redis.call('BITFIELD_RO', key, unpack(ARGV, 2)) end
return {head, redis.call('STRLEN', key), vals}
