-- rebuild.lua: start, finish or give up the rebuild of one partition into a
-- fresh copy, filled from the source of truth while writes go to both.
--
-- KEYS[1]   the partition's key
-- KEYS[2]   its copy (KEYS[1] .. ':next'), created beforehand by add.lua
-- ARGV[1]   the partition's 64-byte header
-- ARGV[2]   'begin': mark KEYS[1] (header byte 49 = 1), so that add.lua and
--           remove.lua write to KEYS[2] too; a missing KEYS[1] stays missing.
--           'switch': replace KEYS[1] with KEYS[2], atomically (RENAME; the
--           copy's header has no mark, so the writes to both end).
--           'abort': unmark KEYS[1] and delete KEYS[2].
-- Returns   'ok'

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
local action = ARGV[2]
if action ~= 'begin' and action ~= 'switch' and action ~= 'abort' then
  return reject('ARGS', 'ARGV[2] is not begin, switch or abort')
end
local exists, head = open(KEYS[1], f)
if exists == nil then return head end
local copied, err = open(KEYS[2], f)
if copied == nil then return err end

if action == 'begin' then
  if not copied then return reject('ARGS', KEYS[2] .. ' does not exist') end
  if exists then redis.call('SETRANGE', KEYS[1], 48, '\1') end
elseif action == 'switch' then
  if not copied then return reject('ARGS', KEYS[2] .. ' does not exist') end
  redis.call('RENAME', KEYS[2], KEYS[1])
else
  if exists then redis.call('SETRANGE', KEYS[1], 48, '\0') end
  if copied then redis.call('DEL', KEYS[2]) end
end
return 'ok'
