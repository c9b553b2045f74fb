-- journal.lua: write the stream entries of a new batch to its journal,
-- except those that already belong to a batch, atomically: each entry
-- belongs to exactly one batch, forever (for the TTL).
--
-- KEYS[1]     the new batch's journal, a list of event records
-- KEYS[1+i]   entry i's batch key, holding the id of its batch (i = 1..n)
-- ARGV[1]     the new batch's id
-- ARGV[2]     time to live of the journal and of the batch keys, ms
-- ARGV[2+i]   entry i's event record
-- Returns     for each entry, the id of the batch it belongs to: ARGV[1]
--             for the entries this call journaled

local ttl = tonumber(ARGV[2])
if #ARGV ~= #KEYS + 1 or ARGV[1] == '' or not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
	return redis.error_reply('STREAMDEDUP_ARGS journal.lua: bad arguments')
end

local owners = {}
local journaled = 0
for i = 2, #KEYS do
	local owner = redis.call('GET', KEYS[i])
	if not owner then
		owner = ARGV[1]
		redis.call('SET', KEYS[i], owner, 'PX', ttl)
		redis.call('RPUSH', KEYS[1], ARGV[i + 1])
		journaled = journaled + 1
	end
	owners[#owners + 1] = owner
end
if journaled > 0 then
	redis.call('PEXPIRE', KEYS[1], ttl)
end
return owners
