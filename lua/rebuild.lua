-- rebuild.lua: one step of the rebuild of one partition into a fresh copy,
-- filled from the source of truth while every add also goes to the copy
-- (see rebuild.go for the protocol and why removes do not).
--
-- KEYS[1]   the partition's key
-- KEYS[2]   its copy (KEYS[1] .. ':next')
-- KEYS[3]   the rebuild's lease (KEYS[1] .. ':rebuild'): the token of the
--           rebuild that holds the partition, then ':m' when the partition
--           existed at the claim (and was marked), ':n' when it was missing
-- ARGV[1]   the partition's 64-byte header as the caller expects it; a
--           partition missing at the claim gets its incarnation at the
--           switch
-- ARGV[2]   the step: 'claim', 'renew', 'switch' or 'abort'
-- ARGV[3]   the rebuild's token: 1 to MAX_TOKEN bytes, none of them ':'
-- ARGV[4]   the lease in ms: the lease and the copy expire that long after
--           the claim or the last renewal, so that a rebuild whose process
--           died holds the partition no longer
-- ARGV[5]   the TTL in ms a partition missing at the claim gets at the
--           switch, 0 for none
-- Returns   'ok', or an error reply, having written nothing:
--   claim   RBLOOM_REBUILDING when another rebuild holds the lease. Else it
--           makes a fresh copy (the partition's header, no items, every
--           slot zero), marks the partition (header byte MARK_BYTE = 1:
--           add.lua then adds to the copy too) and takes the lease.
--   renew   RBLOOM_LOST unless this rebuild holds the lease and the copy
--           exists; extends both.
--   switch  RBLOOM_LOST unless this rebuild holds the lease, the copy is
--           sound, and the partition is as the claim left it: marked, or
--           still missing. Then the copy replaces the partition (RENAME),
--           keeping the partition's TTL, and the lease is dropped.
--   abort   When this rebuild holds the lease, or nobody does: unmarks the
--           partition, deletes the copy and the lease. Else nothing.

local key, copy, lease = KEYS[1], KEYS[2], KEYS[3]
local step, token = ARGV[2], ARGV[3]
local MAX_TOKEN = 40 -- bytes; rebuild.go's tokens have 16

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if step ~= 'claim' and step ~= 'renew' and step ~= 'switch' and step ~= 'abort' then
  return reject('ARGS', 'ARGV[2] is not claim, renew, switch or abort')
end
if #token < 1 or #token > MAX_TOKEN or string.find(token, ':', 1, true) then
  return reject('ARGS', 'ARGV[3] is not a token of 1 to ' .. MAX_TOKEN .. ' bytes without a colon')
end
local leaseMS = int(ARGV[4], 1, 2^50)
local ttl = int(ARGV[5], 0, 2^50)
if not leaseMS or not ttl then return reject('ARGS', 'ARGV[4] or ARGV[5] is not a duration in ms') end

local exists, head, err = open(key, f)
if err then return err end
local holder = redis.call('GET', lease)
local ours = holder and string.sub(holder, 1, #token + 1) == token .. ':'
local state = ours and string.sub(holder, #token + 2) -- 'm' or 'n'
local marked = exists and string.byte(head, MARK_BYTE + 1) == 1

if step == 'claim' then
  if holder and not ours then
    return reject('REBUILDING', lease .. ' is held by another rebuild')
  end
  -- The copy starts as the partition's header, with no items and no mark.
  local h = exists and head or ARGV[1]
  h = string.sub(h, 1, ITEMS_BYTE) .. string.rep('\0', 8) ..
    string.sub(h, ITEMS_BYTE + 9, MARK_BYTE) .. '\0' .. string.sub(h, MARK_BYTE + 2)
  redis.call('DEL', copy)
  redis.call('SETRANGE', copy, f.size - 1, '\0')
  redis.call('SETRANGE', copy, 0, h)
  redis.call('PEXPIRE', copy, leaseMS)
  if exists and not marked then redis.call('SETRANGE', key, MARK_BYTE, '\1') end
  redis.call('SET', lease, token .. ':' .. (exists and 'm' or 'n'), 'PX', leaseMS)
  return 'ok'
end

if step == 'abort' then
  if holder and not ours then return 'ok' end
  if marked then redis.call('SETRANGE', key, MARK_BYTE, '\0') end
  redis.call('DEL', copy, lease)
  return 'ok'
end

-- renew and switch need the lease and a sound copy.
if not ours then
  return reject('LOST', lease .. ' is ' .. (holder and 'held by another rebuild' or 'gone'))
end
local copied, _, copyErr = open(copy, f)
if copyErr then return copyErr end
if not copied then return reject('LOST', copy .. ' is gone') end

if step == 'renew' then
  redis.call('PEXPIRE', copy, leaseMS)
  redis.call('PEXPIRE', lease, leaseMS)
  return 'ok'
end

-- switch
if state == 'm' and not marked then
  return reject('LOST', key .. (exists and ' is no longer marked for this rebuild' or ' vanished during the rebuild'))
elseif state == 'n' and exists then
  return reject('LOST', key .. ' was created during the rebuild')
end
local keepTTL = ttl
if exists then keepTTL = redis.call('PTTL', key) end
redis.call('RENAME', copy, key)
if keepTTL > 0 then redis.call('PEXPIRE', key, keepTTL) else redis.call('PERSIST', key) end
redis.call('DEL', lease)
return 'ok'
