-- apply.lua: count the new events of a batch, once per batch: the counts,
-- the audit trail and the batch's applied marker change together or not
-- at all.
--
-- KEYS[1]   the batch's applied marker
-- KEYS[2]   the counts, a hash from "dimension=value" to new events
-- KEYS[3]   the audit trail, a hash from event id to times counted
-- ARGV[1]   time to live of the marker, ms
-- ARGV[2]   d, the number of dimensions of each event
-- ARGV[3..] for each new event, its id, then its d "dimension=value"
-- Returns   1 when this call counted the batch, 0 when it had been
--           counted before (nothing changed)

local ttl, d = tonumber(ARGV[1]), tonumber(ARGV[2])
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) or not d or d < 0 or d ~= math.floor(d)
	or (#ARGV - 2) % (d + 1) ~= 0 then
	return redis.error_reply('STREAMDEDUP_ARGS apply.lua: bad arguments')
end

if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ttl) then
	return 0 -- a replay: this batch was counted already
end
for i = 3, #ARGV, d + 1 do
	redis.call('HINCRBY', KEYS[3], ARGV[i], 1)
	for j = i + 1, i + d do
		redis.call('HINCRBY', KEYS[2], ARGV[j], 1)
	end
end
return 1
