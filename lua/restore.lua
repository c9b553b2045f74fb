-- restore.lua: one step of a restore (restore.go) on one partition key.
--
-- A restore writes each partition to a staging key in its cluster slot,
-- then installs them all (each with one RENAME, marked MARK_LOAD: reads
-- fail with ErrLoading, writes are applied), then opens them (clears the
-- mark). The lease, in rebuild.lua's format with the state RESTORE_STATE,
-- keeps rebuilds and loads away from a partition between its install and
-- its open.
--
-- A window's partition (window_dump.go) is its ring and its settings: the
-- ring is installed as a filter's partition is, without the settings, so
-- that every call refuses it (window.lua: a ring lives without its
-- settings) and every read (ErrLoading: its mark); the open writes the
-- settings. A partition whose ring had expired when it was dumped has
-- none: the install only takes the lease, the open writes the settings.
--
-- KEYS[1]   the partition's key, or a window partition's ring
-- KEYS[2]   its staging key (KEYS[1] .. ':restore:' .. token)
-- KEYS[3]   the lease (KEYS[1] .. ':rebuild')
-- KEYS[4]   a window partition's settings hash (absent for a filter)
-- ARGV[1]   the 64-byte header the restore wrote at KEYS[2]: its
--           incarnation (fresh), marked MARK_LOAD
-- ARGV[2]   the step: 'install', 'open' or 'abort'
-- ARGV[3]   the restore's token: 1 to 40 bytes, no ':'
-- ARGV[4]   the lease in ms
-- ARGV[5]   the TTL in ms the partition gets at its install, 0 for none
--           (a window's: 0, its ring gets ARGV[8])
-- With KEYS[4] only:
-- ARGV[6]   the ring's length in bytes; 0 when the partition has no ring
-- ARGV[7]   the settings' field 's' (window.lua's ARGV[2])
-- ARGV[8]   the time (Unix ms) at which the ring expires, as window.lua
--           sets it: its PEXPIREAT and the settings' field 'ring'
-- ARGV[9]   the settings' TTL in ms, 0 for none (the root partition's)
-- Returns   RESTORE_OK, or, having written nothing:
--   install  RESTORE_HELD when another rebuild or restore holds the lease;
--            RESTORE_EXISTS when KEYS[1] exists (or KEYS[4] holds 's');
--            RESTORE_LOST when the staging key is gone or not as the
--            restore wrote it. Else KEYS[2] is renamed to KEYS[1] and the
--            lease taken.
--   open     RESTORE_LOST unless the lease is this restore's and KEYS[1]
--            is the partition it installed, still marked (or, without a
--            ring, missing). Else the mark is cleared, the settings
--            written, and the lease deleted.
--   abort    KEYS[2] deleted; while the lease is this restore's, the
--            partition it installed (if still marked) and the lease; and
--            the partition it opened, which holds its fresh incarnation
--            (and the settings that hold it).
-- Steps sent again after a lost reply answer as the first did.

local key, staging, lease = KEYS[1], KEYS[2], KEYS[3]
local want, step, token = ARGV[1], ARGV[2], ARGV[3]

local f, why = parse(want)
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
if string.byte(want, MARK_BYTE + 1) ~= MARK_LOAD then return reject('ARGS', 'ARGV[1] is not marked MARK_LOAD') end
if step ~= 'install' and step ~= 'open' and step ~= 'abort' then
  return reject('ARGS', 'ARGV[2] is not a step of restore.lua')
end
if #token < 1 or #token > 40 or string.find(token, ':', 1, true) then
  return reject('ARGS', 'ARGV[3] is not a token of 1 to 40 bytes without a colon')
end
local leaseMS = int(ARGV[4], 1, 2^50)
local ttl = int(ARGV[5], 0, 2^50)
if not leaseMS or not ttl then return reject('ARGS', 'ARGV[4] or ARGV[5] is not a duration in ms') end
local settings = KEYS[4]
local size, ringAt, settingsTTL = f.size, nil, nil
if settings then
  size, ringAt, settingsTTL = int(ARGV[6], 0, MAX_STRING_BYTES), int(ARGV[8], 1, 2^52), int(ARGV[9], 0, 2^50)
  if not size or (size > 0 and size <= HEADER) or not ringAt or not settingsTTL or ttl ~= 0 then
    return reject('ARGS', 'ARGV[5..9] are not a window partition\'s ring length, expiry and settings TTL')
  end
  if #ARGV[7] <= HEADER or string.sub(ARGV[7], 1, IDENTITY) ~= f.ident then
    return reject('ARGS', 'ARGV[7] does not start with ARGV[1]\'s identity')
  end
end
local ringless = settings and size == 0

local mine = token .. ':' .. RESTORE_STATE
local holder = redis.call('GET', lease)

-- installed returns 'marked' when KEYS[1] is the partition this restore
-- installed, still marked MARK_LOAD; 'open' when it is, its mark cleared
-- (a window partition without a ring: when its settings hold this
-- restore's incarnation); else nil. Its item count may have changed
-- since: writes are applied.
local function installed()
  if ringless then
    if redis.call('HGET', settings, 'inc') == incarnation(want) then return 'open' end
    return nil
  end
  local head = redis.pcall('GETRANGE', key, 0, HEADER - 1)
  if type(head) ~= 'string' or #head ~= HEADER then return nil end
  if string.sub(head, 1, IDENTITY) ~= string.sub(want, 1, IDENTITY) or
      string.sub(head, ITEMS_BYTE + 9, MARK_BYTE) ~= string.sub(want, ITEMS_BYTE + 9, MARK_BYTE) or
      string.sub(head, MARK_BYTE + 2) ~= string.sub(want, MARK_BYTE + 2) then
    return nil
  end
  local mark = string.byte(head, MARK_BYTE + 1)
  if mark == MARK_LOAD then return 'marked' end
  if mark == 0 then return 'open' end
  return nil
end

if step == 'abort' then
  redis.call('DEL', staging)
  local state = installed()
  if holder == mine then
    if state == 'marked' then redis.call('DEL', key) end
    redis.call('DEL', lease)
  elseif state == 'open' then
    redis.call('DEL', key) -- opened by this restore (its fresh incarnation)
  end
  if settings and redis.call('HGET', settings, 'inc') == incarnation(want) then redis.call('DEL', settings) end
  return RESTORE_OK
end

if step == 'open' then
  local state = installed()
  if holder ~= mine then
    if state == 'open' then return RESTORE_OK end -- sent again
    return RESTORE_LOST
  end
  if ringless then
    if redis.call('EXISTS', key) == 1 then return RESTORE_LOST end
  elseif state ~= 'marked' then
    return RESTORE_LOST
  end
  if not ringless then redis.call('SETRANGE', key, MARK_BYTE, '\0') end
  if settings then
    -- Without 's' the hash holds at most the mark of a Drop
    -- (window_life.go's dropMark), which a window made deletes.
    redis.call('DEL', settings)
    redis.call('HSET', settings, 's', ARGV[7], 'inc', incarnation(want), 'ring', ringAt)
    if settingsTTL > 0 then redis.call('PEXPIRE', settings, settingsTTL) end
  end
  redis.call('DEL', lease)
  return RESTORE_OK
end

-- install
if holder == mine then
  if ringless or installed() == 'marked' then return RESTORE_OK end -- sent again
  return RESTORE_LOST
end
if holder then return RESTORE_HELD end
if redis.call('EXISTS', key) == 1 then return RESTORE_EXISTS end
if settings and redis.call('HGET', settings, 's') then return RESTORE_EXISTS end
if ringless then
  redis.call('SET', lease, mine, 'PX', leaseMS)
  return RESTORE_OK
end
if redis.call('EXISTS', staging) == 0 then return RESTORE_LOST end
if redis.call('STRLEN', staging) ~= size or redis.call('GETRANGE', staging, 0, HEADER - 1) ~= want then
  return RESTORE_LOST
end
redis.call('RENAME', staging, key)
if settings then
  redis.call('PEXPIREAT', key, ringAt)
elseif ttl > 0 then
  redis.call('PEXPIRE', key, ttl)
else
  redis.call('PERSIST', key)
end
redis.call('SET', lease, mine, 'PX', leaseMS)
return RESTORE_OK
