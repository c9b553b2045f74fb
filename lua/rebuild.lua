-- rebuild.lua: one step of a rebuild, or of a resize, on one partition key
-- (see rebuild.go for the protocol, and why removes never reach a copy).
--
-- KEYS[1]   a partition's key
-- KEYS[2]   its copy (KEYS[1] .. ':next'): a fresh filter the fill fills,
--           or, on a key a resize retires, only the new filter's header
-- KEYS[3]   the lease (KEYS[1] .. ':rebuild'): the token of the rebuild
--           that holds the key, ':' and the key's state:
--             m  a rebuild's partition, marked (MARK_REBUILD) at the claim
--             x  a partition missing at the claim, which the claim made
--                empty and marked MARK_LOAD: a load (reads of it fail
--                with ErrLoading until the switch)
--             l  a partition already marked MARK_LOAD at the claim (a
--                load that did not finish): loaded again
--             n  a partition of the filter a resize makes (it may hold a
--                partition of the old filter, marked MARK_RESIZE)
--             o  a partition of the old filter that the resize retires
--             s  switched or retired: done (a re-sent step answers 'ok')
-- ARGV[1]   the 64-byte header KEYS[1] is checked against: the filter's
--           (claim, mark, renew, abort, switch of m and x), or the new
--           filter's, with the incarnation its partitions get (prepare,
--           switch of n)
-- ARGV[2]   the step (below)
-- ARGV[3]   the rebuild's token: 1 to MAX_TOKEN bytes, none of them ':'
-- ARGV[4]   the lease in ms: the lease and the copy expire that long after
--           the claim or the last renewal, so that a rebuild whose process
--           died holds nothing for longer
-- ARGV[5]   the TTL in ms a partition that did not exist gets when the
--           claim makes it, or at the switch; 0 for none
-- ARGV[6]   mark: the new filter's header, to keep at KEYS[2] of a key the
--           resize retires; '' for a key it keeps
-- Returns   'ok', or an error reply, having written nothing:
--   claim    (rebuild) RBLOOM_REBUILDING when another rebuild holds the
--            lease. Else a fresh copy (the partition's header, no items,
--            every slot zero), the partition marked MARK_REBUILD (add.lua
--            then adds to the copy too), the lease taken: m. A missing
--            partition is made, empty and marked MARK_LOAD (x); one marked
--            MARK_LOAD keeps its mark (l): add.lua adds to both, reads
--            refuse it.
--   prepare  (resize, each key of the new filter) RBLOOM_REBUILDING as
--            claim. Else a fresh copy with ARGV[1]'s header, the lease: n.
--   mark     (resize, each key of the old filter, after prepare) as claim,
--            but the mark is MARK_RESIZE (add.lua then sends its items to
--            the new filter first), and the lease is o unless prepare
--            took it; RBLOOM_LOADING when the partition is being loaded.
--   renew    RBLOOM_LOST unless this rebuild holds the lease and the copy
--            exists; extends both.
--   check    RBLOOM_LOST unless renew would succeed and the key is as the
--            claim or the mark left it (its mark set, or still missing).
--   switch   check, then for m, x and n: the copy replaces the partition
--            (RENAME), keeping the partition's TTL, and the lease goes.
--   retire   check, then for o: the partition and its header copy go.
--            Switch and retire leave the lease in state s, so that the
--            same step re-sent by go-redis after a lost reply answers
--            'ok' rather than that the rebuild lost the key.
--   release  the lease goes, if this rebuild's and in state s.
--   abort    When this rebuild holds the lease, or nobody does: the mark
--            cleared (MARK_LOAD stays: the partition's items are still
--            not all there), the copy and the lease deleted, and a
--            partition this claim made (x) deleted too. Else nothing.

local key, copy, lease = KEYS[1], KEYS[2], KEYS[3]
local step, token, target = ARGV[2], ARGV[3], ARGV[6]
local MAX_TOKEN = 40 -- bytes; rebuild.go's tokens have 16

local f, why = parse(ARGV[1])
if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
local steps = {claim = true, prepare = true, mark = true, renew = true, check = true, switch = true, retire = true,
  abort = true, release = true}
if not steps[step] then return reject('ARGS', 'ARGV[2] is not a step of rebuild.lua') end
if #token < 1 or #token > MAX_TOKEN or string.find(token, ':', 1, true) then
  return reject('ARGS', 'ARGV[3] is not a token of 1 to ' .. MAX_TOKEN .. ' bytes without a colon')
end
local leaseMS = int(ARGV[4], 1, 2^50)
local ttl = int(ARGV[5], 0, 2^50)
if not leaseMS or not ttl then return reject('ARGS', 'ARGV[4] or ARGV[5] is not a duration in ms') end
if target ~= '' and not parse(target) then return reject('ARGS', 'ARGV[6] is not a header') end

local holder = redis.call('GET', lease)
local ours = holder and string.sub(holder, 1, #token + 1) == token .. ':'
local state = ours and string.sub(holder, #token + 2)
local done = holder and string.sub(holder, -2) == ':s' -- a finished rebuild's
if holder and not ours and not done and (step == 'claim' or step == 'prepare' or step == 'mark') then
  return reject('REBUILDING', lease .. ' is held by another rebuild')
end
if step == 'release' then
  if ours and state == 's' then redis.call('DEL', lease) end
  return 'ok'
end
if ours and state == 's' and step ~= 'abort' then
  if step == 'switch' or step == 'retire' or step == 'check' or step == 'renew' then return 'ok' end
  return reject('ARGS', lease .. ' belongs to a rebuild that is over')
end

-- markOf returns the mark byte of the string at KEYS[1], or nil when it
-- does not exist (or is not a string: open has refused it where it matters).
local function markOf()
  local head = redis.pcall('GETRANGE', key, MARK_BYTE, MARK_BYTE)
  if type(head) ~= 'string' or head == '' then return nil end
  return string.byte(head)
end

-- blank makes k an empty filter whose header is h with no items and the
-- mark byte mark.
local function blank(k, h, mark)
  h = string.sub(h, 1, ITEMS_BYTE) .. string.rep('\0', 8) ..
    string.sub(h, ITEMS_BYTE + 9, MARK_BYTE) .. string.char(mark) .. string.sub(h, MARK_BYTE + 2)
  redis.call('DEL', k)
  redis.call('SETRANGE', k, f.size - 1, '\0')
  redis.call('SETRANGE', k, 0, h)
end

-- fresh makes KEYS[2] an empty filter whose header is h, unmarked,
-- expiring with the lease.
local function fresh(h)
  blank(copy, h, 0)
  redis.call('PEXPIRE', copy, leaseMS)
end

if step == 'mark' then
  local exists, _, err = open(key, f)
  if err then return err end
  if exists and markOf() == MARK_LOAD then return reject('LOADING', key .. ' is being loaded: resize it once the load is over') end
  if target ~= '' then redis.call('SET', copy, target, 'PX', leaseMS) end
  if not ours then redis.call('SET', lease, token .. ':o', 'PX', leaseMS) end
  if exists and markOf() ~= MARK_RESIZE then redis.call('SETRANGE', key, MARK_BYTE, string.char(MARK_RESIZE)) end
  return 'ok'
end

if step == 'claim' then
  local exists, head, err = open(key, f)
  if err then return err end
  fresh(exists and head or ARGV[1])
  local mark, state = markOf(), 'm'
  if not exists then
    -- A load: the partition exists from now on, so that writes are kept
    -- and reads are refused rather than answered "absent".
    blank(key, ARGV[1], MARK_LOAD)
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    state = 'x'
  elseif mark == MARK_LOAD then
    state = 'l'
  elseif mark ~= MARK_REBUILD then
    redis.call('SETRANGE', key, MARK_BYTE, string.char(MARK_REBUILD))
  end
  redis.call('SET', lease, token .. ':' .. state, 'PX', leaseMS)
  return 'ok'
end

if step == 'prepare' then
  fresh(ARGV[1])
  redis.call('SET', lease, token .. ':n', 'PX', leaseMS)
  return 'ok'
end

if step == 'abort' then
  if holder and not ours and not done then return 'ok' end
  if ours and state == 's' then
    redis.call('DEL', lease) -- switched: nothing to undo
    return 'ok'
  end
  local mark = markOf()
  if ours and state == 'x' and mark == MARK_LOAD then
    redis.call('DEL', key, copy, lease) -- made by this claim: a load given up leaves nothing
    return 'ok'
  end
  if mark == MARK_REBUILD or mark == MARK_RESIZE then redis.call('SETRANGE', key, MARK_BYTE, '\0') end
  redis.call('DEL', copy, lease)
  return 'ok'
end

-- renew, check, switch and retire need the lease and the copy.
if not ours then
  return reject('LOST', lease .. ' is ' .. (holder and 'held by another rebuild' or 'gone'))
end
if redis.call('EXISTS', copy) == 0 then return reject('LOST', copy .. ' is gone') end
if step == 'renew' then
  redis.call('PEXPIRE', copy, leaseMS)
  redis.call('PEXPIRE', lease, leaseMS)
  return 'ok'
end

-- The key must be as the claim or the mark left it: a failover to a
-- replica that never got the mark, say, let adds reach the old counters
-- alone, and replacing them would lose those adds.
local mark = markOf()
local loads = state == 'x' or state == 'l'
if (state == 'm' and mark ~= MARK_REBUILD) or (loads and mark ~= MARK_LOAD) or
    (state == 'o' and mark ~= nil and mark ~= MARK_RESIZE) or (state == 'n' and mark ~= nil and mark ~= MARK_RESIZE) then
  return reject('LOST', key .. (mark and ' is no longer marked for this rebuild' or ' vanished during the rebuild'))
end
if state == 'n' or state == 'm' or loads then
  local _, _, copyErr = open(copy, f)
  if copyErr then return copyErr end
end
if step == 'check' then return 'ok' end

if step == 'retire' then
  if state ~= 'o' then return reject('ARGS', key .. ' is not retired by this resize') end
  redis.call('DEL', key, copy)
  redis.call('SET', lease, token .. ':s', 'PX', leaseMS)
  return 'ok'
end

-- switch
if state == 'o' then return reject('ARGS', key .. ' is retired by this resize, not switched') end
local keepTTL = ttl
if mark ~= nil then keepTTL = redis.call('PTTL', key) end
redis.call('RENAME', copy, key)
if keepTTL > 0 then redis.call('PEXPIRE', key, keepTTL) else redis.call('PERSIST', key) end
redis.call('SET', lease, token .. ':s', 'PX', leaseMS)
return 'ok'
