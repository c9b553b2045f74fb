-- rebuild.lua: start, finish or give up the rebuild of one partition into a
-- fresh copy, filled from the source of truth while writes go to both.
--
-- KEYS[1]   the partition's key
-- KEYS[2]   its copy (KEYS[1] .. ':next'), created beforehand by add.lua
-- ARGV[1]   the partition's 64-byte header
-- ARGV[2]   'begin': mark KEYS[1] (header byte 48 = 1), so that add.lua and
--           remove.lua write to KEYS[2] too; a missing KEYS[1] stays missing.
--           'switch': replace KEYS[1] with KEYS[2], atomically (RENAME; the
--           copy's header has no mark, so the writes to both end).
--           'abort': unmark KEYS[1] and delete KEYS[2].
-- Returns   'ok'

local key, copy = KEYS[1], KEYS[2]
local action = ARGV[2]

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if action ~= 'begin' and action ~= 'switch' and action ~= 'abort' then
  return reject('ARGS', 'ARGV[2] is not begin, switch or abort')
end
local exists, _, err = open(key, f)
if err then return err end
local copied
copied, _, err = open(copy, f)
if err then return err end

if action == 'begin' then
  if not copied then return reject('ARGS', copy .. ' does not exist') end
  if exists then redis.call('SETRANGE', key, MARK_BYTE, '\1') end
elseif action == 'switch' then
  if not copied then return reject('ARGS', copy .. ' does not exist') end
  redis.call('RENAME', copy, key)
else
  if exists then redis.call('SETRANGE', key, MARK_BYTE, '\0') end
  if copied then redis.call('DEL', copy) end
end
return 'ok'
