-- window.lua: test-or-add events in a window, atomically.
--
-- A window partition is one Redis string, its ring (docs/format.md):
--   bytes 0 .. HEADER-1   the header of one generation's partition (classic)
--   then the state, int64 big-endian each: the bucket in ms, W, the
--     cleaning cursor, then for each ring position q = 0 .. W-1 the bucket
--     it holds (> 0; 0: clean, -1: to clean, -2: being cleaned in this
--     pass) and the events added to it
--   then m words of W bits, one per slot, from byte DATA
-- Bit q of slot s's word (bit DATA*8 + s*W + q of the string) is slot s of
-- the generation at position q. The generation of bucket b (Unix ms over
-- the bucket's ms) lives at position b mod W. W = gens + 2: the current
-- bucket's generation, the gens before it (the live ones), and one whose
-- bits are cleared while the current bucket runs, for the next.
--
-- An event was seen when some live generation has its bit set in all k of
-- its words. The client reads that first, with plain commands
-- (window_read.go's preRead: Lua's calls into Redis cost several times a
-- plain command's), and says for each event whether it found it held
-- (ARGV[13]). Past generations only lose bits while a bucket runs (only
-- the current one is written; a generation is cleared once out of the
-- span), so in the bucket of the client's read an event it found in none
-- of them is still in none: the call sets its bit in the current
-- generation's k words, and the bits' old values (BITFIELD SET answers
-- them) say whether all of them were set, by an earlier call or an equal
-- event before it in this call: then it answers seen. In another bucket
-- than the read's, or for events the client did not read (NOT_READ), the
-- call reads the words itself, one BITFIELD GET per word reading every
-- generation at once, so that the cost does not grow with the span.

-- The clock is Redis's (TIME), never earlier than the newest generation:
-- every process agrees on the bucket, and a clock that steps back does
-- not reopen an old one. A generation that leaves the span is cleared in
-- passes over the words, CLEAN_STEP bytes at a time with BITOP AND
-- against a mask, a step in the calls that find the pass behind schedule.
--
-- KEYS[1]   the ring
-- KEYS[2]   the window's settings in this slot, a hash: 's' holds ARGV[2];
--           'ring' the time (ms) at which the ring expires if nothing is
--           written, so that one lost before it is told from one expired;
--           'inc' the ring's incarnation. It outlives the ring by twice the
--           id lifetime: a ring made again after it expired takes the same
--           incarnation, so the operation ids applied to it are replayed.
--           The root's never expire: Create writes them and Drop deletes
--           them, so a window Redis lost is told from one never made.
--           After a Drop the root's hold only 'dropped' (window_life.go's
--           dropMark)
-- KEYS[3], KEYS[4]  scratch keys of a cleaning step (the mask, the chunk),
--           deleted before the script returns
-- KEYS[5..] the hashes of this call's record, as in add.lua: one, or
--           ONCE_RECORD_KEYS under an operation id
-- ARGV[1]   the generations' 64-byte header (classic); a call that may
--           create the ring gives it the incarnation of the new rings
-- ARGV[2]   the window's settings: ARGV[1], then its bucket, span and
--           blocks (ring.go's windowSettings)
-- ARGV[3]   the bucket in ms
-- ARGV[4]   gens, the past generations read besides the current one
-- ARGV[5]   the TTL in ms a record hash gets from its first record
-- ARGV[6]   the record's field, as in add.lua
-- ARGV[7]   the record's tag, as in add.lua
-- ARGV[8]   '' to use Redis's clock, or a time in ms (tests)
-- ARGV[9]   CREATE_RING if this call may create the ring (the root's
--           only once its settings exist), CREATE_NONE if not: the client
--           creates the rings of every partition together; CREATE_SETTINGS
--           to write only the settings of a missing ring: the root's, by
--           Create alone, before the other rings are made, so that the
--           root's ring missing beside live ones is told from one being
--           made (window_life.go's rootLost)
-- ARGV[10]  the bucket the client expects the call to be in
-- ARGV[11]  PART_ROOT for the window's root partition, whose ring the
--           client touches in every call and expires first; PART_OTHER for
--           the others,
--           whose rings live three buckets longer
-- ARGV[12]  the round: a token the client gives the calls it sends
--           together. A call that answers REPLY_WAIT keeps it in the settings
--           ('wait'), and the later calls of its round answer so too, so
--           that none is applied before it
-- ARGV[13]  one character per event, what the client's read of the ring
--           in bucket ARGV[10] found (window_read.go's preRead): FOUND_HELD held by
--           a live generation (answered seen), FOUND_NONE in none of the
--           past ones; both used only when the call is in that bucket.
--           NOT_READ: not read (the call reads it)
-- ARGV[14..] for each event not FOUND_HELD, its k slots, the bit offset of the slot's bit in
--           ARGV[10]'s generation, in decimal: the slot's word, plus
--           ARGV[10] mod W (so that the script writes the client's strings
--           and converts no number)
-- Returns   one character per event: ANSWER_SEEN (not added), ANSWER_NEW
--           (added); REPLY_MISSING when the ring does not exist and
--           ARGV[9] is CREATE_NONE; REPLY_WAIT when the current bucket's
--           position was still being cleared as the call began (nothing
--           answered: call again). When the call is in another bucket than
--           ARGV[10], the answers follow REPLY_MOVED, the bucket and ':';
--           or, when the call has events found held (which come without
--           their words), REPLY_REREAD and the bucket alone (nothing
--           answered: call again, the events not read). The constants
--           come from window_call.go, which decodes the reply
--           (decodeWindowReply).
--           Fails with RBLOOM_MISMATCH when the stored settings are not
--           this call's, and RBLOOM_DAMAGED when the ring is missing
--           before its time, truncated, lives without its settings (which
--           outlive it), or holds a state no window writes: its events
--           must not be answered new.

-- window is the script: its steps are local functions, and its end, the
-- script's outline, calls them. A step returns a refusal (an error reply,
-- or a reply that ends the call) or nil, then what it found. The steps
-- share the call's window and its ring's state as window's locals, and
-- pass the rest as arguments, not in tables; their hot loops read locals
-- only, not upvalues. Each call of the script makes its closures, their
-- upvalues and its tables again, and in small calls each of them counts:
-- made in a function, a closure copies its upvalues from the function's,
-- where at the top level it would look each up in the list of the top
-- level's open ones, filter.lua's and the constants' included.
local function window()
  local FIRST_OFFSET = 14    -- the ARGV of the first word offset
  local CLEAN_STEP = 32768   -- bytes of words one BITOP clears: 100-150 us a step at the seed's size
  local CLEAN_CALL = 1       -- steps a call that answers events takes, when the pass is behind
  local CLEAN_BLOCKED = 4    -- steps a call takes when its bucket waits on them
  local MAX_ROUND = 40       -- bytes of a round token (ARGV[12])
  local MAX_WORDS = 1500     -- slot words a call reads and writes: 4 BITFIELD arguments each at most
  local ring, settings, maskKey, scratch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
  local head, settingsArg, field, tag, clock, create = ARGV[1], ARGV[2], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
  local root, round = ARGV[11], ARGV[12]

  -- The window, as checkCall finds it: the generations' header, the
  -- bucket in ms, the generations read (gens) and kept (W), the record's
  -- TTL, the ring's layout, and the TTLs of the ring and of its settings.
  local f, bucketMS, gens, keep, W, DATA, size, dataBytes, ttl, settingsTTL
  -- The ring's state, as readRing reads it and the steps change it:
  -- held[q], what position q holds, as in the state; the cleaning cursor;
  -- the BITFIELD arguments that write the state back (setHeld).
  local held, cursor, writes = {}, 0, {}

  -- int64 reads the big-endian int64 at byte i (from 1) of s, and buckets
  -- the W positions' buckets of the state s into held (arguments, for in
  -- miniredis's Lua a function made in the if block below reads W, which
  -- checkCall sets later, as nil). Redis's struct library does it in C:
  -- the state's W + 3 of them cost about 2 us a call where Lua took 15 at
  -- the seed's W = 26. miniredis's Lua has no struct: there, the bytes.
  local int64, buckets
  local hasStruct, structLib = pcall(function() return struct end)
  if hasStruct and structLib then
    local unpackInt = structLib.unpack
    int64 = function(s, i) return (unpackInt('>i8', s, i)) end
    -- Up to 200 in one C call (the Lua stack takes about 8,000 values).
    buckets = function(s, held, W)
      local skip = string.rep('x', RING_POSITION_SIZE - 8)
      for lo = 0, W - 1, 200 do
        local c = math.min(200, W - lo)
        local v = {unpackInt('>' .. string.rep('i8' .. skip, c), s, RING_POSITIONS_BYTE + 1 + RING_POSITION_SIZE * lo)}
        for x = 1, c do held[lo + x - 1] = v[x] end
      end
    end
  else
    local byte = string.byte
    int64 = function(s, i)
      local a, b, c, d, e, g, h, l = byte(s, i, i + 7)
      if a >= 128 then -- two's complement: -1 - the inverted bits
        return -1 - ((((((((255 - a) * 256 + 255 - b) * 256 + 255 - c) * 256 + 255 - d) * 256 +
          255 - e) * 256 + 255 - g) * 256 + 255 - h) * 256 + 255 - l)
      end
      return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + g) * 256 + h) * 256 + l
    end
    buckets = function(s, held, W)
      for q = 0, W - 1 do held[q] = int64(s, RING_POSITIONS_BYTE + 1 + RING_POSITION_SIZE * q) end
    end
  end

  -- band is Lua's bit.band; miniredis's Lua has no bit library.
  local hasBit, bitLib = pcall(function() return bit end)
  local band = hasBit and bitLib and bitLib.band or function(a, b)
    local r, p = 0, 1
    while a > 0 and b > 0 do
      local x, y = a % 2, b % 2
      if x == 1 and y == 1 then r = r + p end
      a, b, p = (a - x) / 2, (b - y) / 2, p * 2
    end
    return r
  end

  -- checkCall checks the generations' header, the window and the keys
  -- (ARGV[1..5], ARGV[9], ARGV[11], KEYS), and sets the window's locals.
  -- The ring lives for the span after its last write (the others than
  -- the root three buckets more, so that the root, which every call
  -- touches, expires first); the settings remember until when, and the
  -- incarnation: the root's never expire, the others' outlive their ring
  -- by a bucket (writeKeys's refresh waits one), and by twice the id
  -- lifetime.
  local function checkCall()
    local why
    f, why = parse(head)
    if not f then return reject('ARGS', 'ARGV[1]: ' .. why) end
    if f.mode ~= 'b' then return reject('ARGS', 'a window holds classic generations') end
    bucketMS, gens, keep = int(ARGV[3], 1, 2^40), int(ARGV[4], 1, 10000), int(ARGV[5], 1, 2^50)
    if not bucketMS or not gens or not keep then
      return reject('ARGS', 'ARGV[3..5] are not a bucket, a number of generations and a duration')
    end
    if #settingsArg <= HEADER or string.sub(settingsArg, 1, IDENTITY) ~= f.ident then
      return reject('ARGS', 'ARGV[2] does not start with ARGV[1]\'s identity')
    end
    if create ~= CREATE_NONE and create ~= CREATE_RING and create ~= CREATE_SETTINGS then
      return reject('ARGS', 'ARGV[9] is not ' .. CREATE_NONE .. ', ' .. CREATE_RING .. ' or ' .. CREATE_SETTINGS)
    end
    if root ~= PART_ROOT and root ~= PART_OTHER then return reject('ARGS', 'ARGV[11] is not ' .. PART_ROOT .. ' or ' .. PART_OTHER) end
    if #KEYS < 5 then return reject('ARGS', 'want the ring, the settings, two scratch keys and a record') end
    W = gens + 2
    DATA = RING_POSITIONS_BYTE + RING_POSITION_SIZE * W
    size = DATA + math.ceil(f.m * W / 8)
    if size > MAX_STRING_BYTES then return reject('ARGS', 'a ring of ' .. size .. ' bytes does not fit in a Redis string') end
    dataBytes = size - DATA
    ttl = math.max(W * bucketMS, MIN_RING_TTL)
    if root == PART_OTHER then ttl = ttl + OTHER_RING_BUCKETS * bucketMS end
    settingsTTL = math.max(ttl + bucketMS, 2 * 1000 * f.once)
  end

  -- checkEvents checks the events (ARGV[13], ARGV[10], ARGV[14..]) and
  -- returns what the client's read found of each (found), how many it
  -- found held, the bucket it read in (expected), bases[i], the words
  -- before event i's (an event found held has none), and the words: each
  -- offset less expected mod W.
  local function checkEvents()
    local nOffsets = #ARGV - FIRST_OFFSET + 1
    local found = ARGV[13] or ''
    if #found > MAX_WORDS or string.find(found, '[^' .. FOUND_HELD .. FOUND_NONE .. NOT_READ .. ']') then
      return reject('ARGS', 'ARGV[13] is not one ' .. FOUND_HELD .. ', ' .. FOUND_NONE .. ' or ' .. NOT_READ .. ' an event')
    end
    local _, nHeld = string.gsub(found, FOUND_HELD, '')
    local withWords = #found - nHeld
    if nOffsets ~= withWords * f.k or nOffsets > MAX_WORDS then
      return reject('ARGS', nOffsets .. ' word offsets for ' .. withWords .. ' events not found held, at k = ' .. f.k .. ', up to ' .. MAX_WORDS)
    end
    local bases, H, k, off = {}, string.byte(FOUND_HELD), f.k, 0
    for i = 1, #found do
      bases[i] = off
      if string.byte(found, i) ~= H then off = off + k end
    end
    local expected = int(ARGV[10], 1, 2^50)
    if not expected then return reject('ARGS', 'ARGV[10] is not a bucket') end
    local words, qe = {}, expected % W
    local lo, hi = DATA * 8 + qe, DATA * 8 + (f.m - 1) * W + qe
    local ok, bad = pcall(function()
      -- Locals, not upvalues: each use of an upvalue costs an instruction.
      local args, into, low, high, width, shift, before = ARGV, words, lo, hi, W, qe, FIRST_OFFSET - 1
      for i = before + 1, #args do
        local o = args[i] + 0
        if o < low or o > high or (o - low) % width ~= 0 then return i end
        into[i - before] = o - shift
      end
    end)
    if not ok then return reject('ARGS', 'ARGV[' .. FIRST_OFFSET .. '..] are not all numbers') end
    if bad then return reject('ARGS', 'ARGV[' .. bad .. '] is not the bit offset of a slot\'s word') end
    return nil, found, nHeld, expected, bases, words
  end

  -- readClock returns the time in ms: Redis's (TIME), or ARGV[8]'s.
  local function readClock()
    if clock == '' then
      local t = redis.call('TIME')
      return nil, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local now = int(clock, 1, 2^52)
    if not now then return reject('ARGS', 'ARGV[8] is not a time in ms') end
    return nil, now
  end

  -- readSettings checks the round (ARGV[12]) and returns what the
  -- window's settings hold: 's', 'ring' (a number), 'inc' and 'wait'. A
  -- handle with other settings is refused before anything else, replays
  -- included: its events live elsewhere, or mean something else.
  local function readSettings()
    if #round < 1 or #round > MAX_ROUND then return reject('ARGS', 'ARGV[12] is not a round token') end
    local stored = redis.call('HMGET', settings, 's', 'ring', 'inc', 'wait', 'dropped')
    local storedSettings, expires, storedInc = stored[1], tonumber(stored[2]), stored[3]
    if storedInc and #storedInc ~= INC_SIZE then return reject('DAMAGED', settings .. ': an incarnation of ' .. #storedInc .. ' bytes') end
    if storedSettings and storedSettings ~= settingsArg then
      return reject('MISMATCH', settings .. ' holds other settings than this handle\'s (partitions, events per bucket, error rate, id lifetime, bucket or span)')
    end
    return nil, storedSettings, expires, storedInc, stored[4]
  end

  -- checkState checks the header and state got of a ring that exists, and
  -- reads the state.
  local function checkState(got, storedSettings, storedInc)
    -- The settings outlive the ring: a ring without them lost them, and
    -- with them what would tell a handle of other settings from its own.
    if not storedSettings then
      return reject('DAMAGED', ring .. ' lives and ' .. settings .. ' is gone: which window it holds is not known')
    end
    if string.sub(got, 1, IDENTITY) ~= f.ident then
      local have, whyNot = parse(string.sub(got, 1, HEADER))
      if not have then return reject('NOTFILTER', ring .. ': ' .. whyNot) end
      return reject('MISMATCH', ring .. ' is ' .. describe(have) .. ', caller wants ' .. describe(f))
    end
    local length = redis.call('STRLEN', ring)
    if length ~= size or #got ~= DATA then
      return reject('DAMAGED', ring .. ' is ' .. length .. ' bytes long, want ' .. size)
    end
    if string.sub(got, RESERVED_BYTE + 1, HEADER) ~= RESERVED then
      return reject('NOTFILTER', ring .. ': reserved header bytes are not zero')
    end
    if int64(got, RING_BUCKET_BYTE + 1) ~= bucketMS or int64(got, RING_W_BYTE + 1) ~= W then
      return reject('MISMATCH', ring .. ' holds a window of other buckets or span')
    end
    cursor = int64(got, RING_CURSOR_BYTE + 1)
    if cursor < 0 or cursor > dataBytes or cursor % W ~= 0 then
      -- A step starts at a multiple of W bytes, the mask's period.
      return reject('DAMAGED', ring .. ': cleaning cursor ' .. cursor)
    end
    if storedInc and incarnation(got) ~= storedInc then
      return reject('DAMAGED', ring .. ' has another incarnation than ' .. settings .. ' says: another ring was put in its place')
    end
    buckets(got, held, W)
    for q = 0, W - 1 do
      local h = held[q]
      if h < -2 or (h > 0 and h % W ~= q) then
        return reject('DAMAGED', ring .. ': position ' .. q .. ' holds ' .. h)
      end
    end
    -- Every call marks the generations older than the span before it
    -- writes, so no window leaves two more than gens buckets apart: a
    -- position rewritten with another bucket of its residue would push
    -- live generations out of the span, and their events would answer new.
    local newest = 0
    for q = 0, W - 1 do
      if held[q] > newest then newest = held[q] end
    end
    for q = 0, W - 1 do
      if held[q] > 0 and held[q] < newest - gens then
        return reject('DAMAGED', ring .. ': position ' .. q .. ' holds bucket ' .. held[q] .. ', more than ' .. gens .. ' before bucket ' .. newest)
      end
    end
  end

  -- readRing reads the ring's header and state, checks them, and returns
  -- the header ('' for a ring that does not exist, the call's to make), and
  -- the ring's incarnation: an operation id's record holds the incarnation
  -- of the rings it was applied to, so that one left by a window that was
  -- dropped is not replayed.
  local function readRing(now, storedSettings, expires, storedInc)
    local got = redis.pcall('GETRANGE', ring, 0, DATA - 1)
    if type(got) == 'table' then
      if string.find(got.err, 'WRONGTYPE', 1, true) then return reject('NOTFILTER', ring .. ' holds another type') end
      return got
    end
    if got == '' then
      if redis.call('EXISTS', ring) == 1 then return reject('NOTFILTER', ring .. ' holds an empty string') end
      if expires and now < expires then
        return reject('DAMAGED', ring .. ' was written until ' .. expires .. ' and is gone: its events cannot be told from new ones')
      end
      if create == CREATE_NONE then return REPLY_MISSING end
      for q = 0, W - 1 do held[q] = 0 end
    else
      local stop = checkState(got, storedSettings, storedInc)
      if stop then return stop end
    end
    return nil, got, storedInc or incarnation(got ~= '' and got or head)
  end

  -- writeSettings writes the settings of a missing ring alone
  -- (CREATE_SETTINGS), and answers REPLY_MISSING.
  local function writeSettings(got, storedSettings, expires, storedInc, inc)
    if got == '' then
      if not storedSettings then
        -- Without 's' the hash holds at most the mark of a Drop (window_life.go's
        -- dropMark), which a window made deletes.
        redis.call('DEL', settings)
        redis.call('HSET', settings, 's', settingsArg)
      end
      if not storedSettings or not storedInc then redis.call('HSET', settings, 'inc', inc) end
      if root == PART_ROOT then redis.call('PERSIST', settings)
      elseif not expires then redis.call('PEXPIRE', settings, settingsTTL) end
    end
    return REPLY_MISSING
  end

  -- setHeld sets what position q holds to v, in held and in the writes.
  local function setHeld(q, v)
    held[q] = v
    local at = RING_POSITIONS_BYTE + RING_POSITION_SIZE * q -- the byte of q's bucket, then of its events
    writes[#writes + 1] = 'SET'; writes[#writes + 1] = 'i64'; writes[#writes + 1] = 8 * at
    writes[#writes + 1] = v
    if v == 0 then -- cleared: no events
      writes[#writes + 1] = 'SET'; writes[#writes + 1] = 'i64'; writes[#writes + 1] = 8 * (at + 8)
      writes[#writes + 1] = 0
    end
  end

  -- writeState writes the state changes made so far, 6,000 BITFIELD
  -- arguments a call (unpack's limit is about 8,000: a call after a long
  -- pause may mark thousands of positions).
  local function writeState()
    for lo = 1, #writes, 6000 do
      redis.call('BITFIELD', ring, unpack(writes, lo, math.min(#writes, lo + 5999)))
    end
    writes = {}
  end

  -- currentBucket returns the bucket now: Redis's, or the newest one
  -- written if that is later (a clock stepped back); a generation newer
  -- than Redis's clock by more than the span is damage, not time. It marks
  -- the generations that bucket leaves out of the span, to clean.
  local function currentBucket(now)
    local c = math.floor(now / bucketMS)
    for q = 0, W - 1 do
      if held[q] > c + W then
        return reject('DAMAGED', ring .. ': position ' .. q .. ' holds bucket ' .. held[q] .. ', ahead of the clock\'s ' .. c)
      end
    end
    for q = 0, W - 1 do
      if held[q] > c then c = held[q] end
    end
    for q = 0, W - 1 do
      if held[q] > 0 and held[q] < c - gens then setHeld(q, -1) end
    end
    return nil, c
  end

  -- writeKeys makes a missing ring, writes the settings it lacks, and
  -- refreshes the ring's TTL once a bucket.
  local function writeKeys(now, got, storedSettings, expires, storedInc, inc)
    if got == '' then
      redis.call('SETRANGE', ring, size - 1, '\0')
      redis.call('SETRANGE', ring, 0, string.sub(head, 1, INC_BYTE) .. inc .. string.sub(head, INC_BYTE + INC_SIZE + 1))
      redis.call('BITFIELD', ring, 'SET', 'i64', 8 * RING_BUCKET_BYTE, bucketMS, 'SET', 'i64', 8 * RING_W_BYTE, W)
    end
    if not storedSettings then redis.call('HSET', settings, 's', settingsArg) end
    if not storedInc then redis.call('HSET', settings, 'inc', inc) end
    if not expires or expires < now + ttl - bucketMS then
      if clock == '' then redis.call('PEXPIREAT', ring, now + ttl) else redis.call('PEXPIRE', ring, ttl) end
      redis.call('HSET', settings, 'ring', now + ttl)
      if root == PART_OTHER then redis.call('PEXPIRE', settings, settingsTTL) end
    end
  end

  -- cleanMask returns the mask of a cleaning step of step bytes: it keeps
  -- every bit but those of positions being cleaned. It is made from the
  -- state each time, never trusted from a key. Its period is W bytes, 8
  -- words, and every step starts at a multiple of it.
  local function cleanMask(step)
    local period = {}
    for i = 0, W - 1 do
      local v = 0
      for b = 0, 7 do
        if held[(8 * i + b) % W] ~= -2 then v = v + 2 ^ (7 - b) end
      end
      period[i + 1] = string.char(v)
    end
    return string.rep(table.concat(period), step / W)
  end

  -- clean takes up to steps steps of the cleaning pass, starting one for
  -- the positions to clean when none runs.
  local function clean(steps)
    local active, waiting = false, false
    for q = 0, W - 1 do
      if held[q] == -2 then active = true elseif held[q] == -1 then waiting = true end
    end
    if not active then
      if not waiting then return end
      for q = 0, W - 1 do
        if held[q] == -1 then setHeld(q, -2) end
      end
      cursor = 0
      writes[#writes + 1] = 'SET'; writes[#writes + 1] = 'i64'; writes[#writes + 1] = 8 * RING_CURSOR_BYTE
      writes[#writes + 1] = 0
    end
    if steps == 0 then return end
    local step = W * math.floor(CLEAN_STEP / W)
    redis.call('SET', maskKey, cleanMask(step))
    for _ = 1, steps do
      if cursor >= dataBytes then break end
      local from = DATA + cursor
      local to = math.min(from + step, size) - 1
      redis.call('SET', scratch, redis.call('GETRANGE', ring, from, to))
      redis.call('BITOP', 'AND', scratch, scratch, maskKey)
      redis.call('SETRANGE', ring, from, redis.call('GETRANGE', scratch, 0, to - from))
      cursor = cursor + to - from + 1
    end
    redis.call('DEL', maskKey, scratch)
    writes[#writes + 1] = 'SET'; writes[#writes + 1] = 'i64'; writes[#writes + 1] = 8 * RING_CURSOR_BYTE
    if cursor < dataBytes then
      writes[#writes + 1] = cursor
      return
    end
    writes[#writes + 1] = 0
    cursor = 0
    for q = 0, W - 1 do
      if held[q] == -2 then setHeld(q, 0) end
    end
  end

  -- startBucket gives the current bucket c its position. One that still
  -- holds bits of an old generation is cleared first, over as many calls
  -- as it takes, and the call answers REPLY_WAIT, even when it finished
  -- the clearing, and so do the later calls of its round (ARGV[12]): none
  -- may be applied before this one's events.
  local function startBucket(c)
    local qc = c % W
    if held[qc] == 0 then setHeld(qc, c) end
    if held[qc] == c then return nil end
    clean(CLEAN_BLOCKED)
    if held[qc] == 0 then setHeld(qc, c) end
    writeState()
    redis.call('HSET', settings, 'wait', round)
    return REPLY_WAIT
  end

  -- cleanShare takes a share of the cleaning that the next bucket will
  -- need: a pass is spread over the first three quarters of a bucket, a
  -- step in a call when the cursor is behind that schedule, so that few
  -- calls pay for it.
  local function cleanShare(now, c)
    local into = (now - c * bucketMS) / (0.75 * bucketMS)
    if into < 0 or into > 1 then into = 1 end
    clean((cursor < dataBytes * into) and CLEAN_CALL or 0)
  end

  -- masks returns which bits of a word are live generations, the current
  -- one included (any), and the current one's (field cj, bit cbit): words
  -- of more than RING_FIELD_BITS are read as F fields of up to that (of
  -- types typ), which Lua's bit library handles.
  local function masks(c)
    local qc = c % W
    local F = math.ceil(W / RING_FIELD_BITS)
    local width, typ, live, any = {}, {}, {}, {}
    for j = 1, F do
      width[j] = math.min(RING_FIELD_BITS, W - RING_FIELD_BITS * (j - 1))
      typ[j] = 'u' .. width[j]
      live[j] = 0
    end
    for q = 0, W - 1 do
      if q ~= qc and held[q] > 0 and held[q] >= c - gens then
        local j = math.floor(q / RING_FIELD_BITS) + 1
        live[j] = live[j] + 2 ^ (width[j] - 1 - q % RING_FIELD_BITS)
      end
    end
    local cj = math.floor(qc / RING_FIELD_BITS) + 1
    local cbit = 2 ^ (width[cj] - 1 - qc % RING_FIELD_BITS)
    for j = 1, F do any[j] = live[j] + ((j == cj) and cbit or 0) end
    return F, typ, any, cj, cbit
  end

  -- readWords reads the words t = from .. to of the events in list into
  -- vals: word w's field j at vals[(w - 1) * F + j].
  local function readWords(bases, words, F, typ, vals, list, from, to)
    local fmt, bits = string.format, RING_FIELD_BITS
    local get, at, a, g = {}, {}, 0, 0
    for x = 1, #list do
      local i = list[x]
      for t = from, to do
        local w = bases[i] + t
        for j = 1, F do
          -- An offset as a string: Redis turns a number into one with
          -- %.17g, about 200 ns each. One store a statement: a multiple
          -- assignment stores right to left, the last index first, in
          -- the table's hash part.
          get[g + 1] = 'GET'
          get[g + 2] = typ[j]
          get[g + 3] = fmt('%d', words[w] + bits * (j - 1))
          g = g + 3
          a = a + 1
          at[a] = (w - 1) * F + j
        end
      end
    end
    for lo = 1, #get, 6000 do
      local part = redis.call('BITFIELD_RO', ring, unpack(get, lo, math.min(#get, lo + 5999)))
      for x = 1, #part do vals[at[(lo - 1) / 3 + x]] = part[x] end
    end
  end

  -- readEvents reads the words the call reads itself, and returns them as
  -- readWords keeps them. In the bucket of the client's read (fast) it
  -- reads only the events the client did not read (NOT_READ; ARGV[13]
  -- says what it found of the others); in another, every event (none came
  -- without its words: see REPLY_REREAD). The first words of each, then
  -- more only for the events those leave in doubt, in stages: a new event
  -- rarely has a generation whose bits are set in its first 4 words (a
  -- full generation has a third of its bits set at the window's k: 1 in
  -- 100, for each of 26), and more rarely in its first 6 (1 in 900), so
  -- it costs about 5 reads, not k. A word not read is false, not nil: a
  -- table filled in order keeps its array part, where keyed sparsely it
  -- is a hash, and each insert costs several times more.
  local function readEvents(found, bases, words, fast, F, typ, any)
    local k, band, D = f.k, band, string.byte(NOT_READ)
    local vals, list, from = {}, {}, 1
    for i = 1, #found do
      if not fast or string.byte(found, i) == D then list[#list + 1] = i end
    end
    if #list == 0 then return vals end
    for x = 1, #words * F do vals[x] = false end
    for _, upto in ipairs({4, 6, k}) do
      upto = math.min(upto, k)
      if upto >= from then
        readWords(bases, words, F, typ, vals, list, from, upto)
        if upto == k then break end
        local doubt, d = {}, 0
        for x = 1, #list do
          local i = list[x]
          for j = 1, F do
            local a = any[j]
            for t = 1, upto do
              if a == 0 then break end
              a = band(a, vals[(bases[i] + t - 1) * F + j])
            end
            if a ~= 0 then d = d + 1; doubt[d] = i; break end
          end
        end
        if d == 0 then break end
        list, from = doubt, upto + 1
      end
    end
    return vals
  end

  -- settle answers the events answer wrote: seen when all k of their bits
  -- were set before (read so, or as the old values BITFIELD answered),
  -- new otherwise, and counted in the current generation's events. It
  -- returns the answers.
  local function settle(qc, out, written, nw, old)
    local k, SEEN, NEW, added = f.k, ANSWER_SEEN, ANSWER_NEW, 0
    for x = 1, nw, 3 do
      local set, first = written[x + 2], written[x + 1]
      local ones = set
      for y = first, first + (k - set) - 1 do ones = ones + old[y] end
      if ones == k then
        out[written[x]] = SEEN
      else
        out[written[x]] = NEW
        added = added + 1
      end
    end
    if added > 0 then
      redis.call('BITFIELD', ring, 'INCRBY', 'i64', 8 * (RING_POSITIONS_BYTE + RING_POSITION_SIZE * qc + 8), added)
    end
    return table.concat(out)
  end

  -- answer answers the events. An event not held gets its bit set in the
  -- current generation's k words. One whose k bits were all set already,
  -- as read or as the old values BITFIELD answers say, answers seen: an
  -- earlier call added it, or an equal event before it in this call (or
  -- others, a false positive, as separate calls would give).
  local function answer(c, fast, found, bases, words)
    local F, typ, any, cj, cbit = masks(c)
    local vals = readEvents(found, bases, words, fast, F, typ, any)
    local argv, qc, k, band, byte, H = ARGV, c % W, f.k, band, string.byte, string.byte(FOUND_HELD)
    local SEEN, before = ANSWER_SEEN, FIRST_OFFSET - 1
    local out, add, na = {}, {}, 0
    local written, nw = {}, 0 -- per event written: its index, its first SET's reply, its bits read set
    for i = 1, #found do
      local base = bases[i]
      local seen = false
      if byte(found, i) == H then
        seen = true -- found held, in this bucket (else the call answered REPLY_REREAD)
      elseif vals[(base + k - 1) * F + 1] then
        -- All k words read: some generation had all the bits of its first
        -- words. The others are not held.
        for j = 1, F do
          local a = any[j]
          for t = 1, k do
            a = band(a, vals[(base + t - 1) * F + j])
            if a == 0 then break end
          end
          if a ~= 0 then seen = true; break end
        end
      end
      if seen then
        out[i] = SEEN
      else
        local set = 0
        written[nw + 1] = i
        written[nw + 2] = na / 4 + 1
        for t = 1, k do
          local w = base + t
          local v = vals[(w - 1) * F + cj]
          if v and band(v, cbit) ~= 0 then
            set = set + 1
          else
            add[na + 1] = 'SET'
            add[na + 2] = 'u1'
            add[na + 3] = fast and argv[before + w] or words[w] + qc
            add[na + 4] = '1'
            na = na + 4
          end
        end
        written[nw + 3] = set
        nw = nw + 3
      end
    end
    local old = na > 0 and redis.call('BITFIELD', ring, unpack(add)) or {}
    return settle(qc, out, written, nw, old)
  end

  -- The script: every check, then the writes.
  local stop = checkCall()
  if stop then return stop end
  local found, nHeld, expected, bases, words, now, storedSettings, expires, storedInc, wait, got, inc, c
  stop, found, nHeld, expected, bases, words = checkEvents()
  if stop then return stop end
  stop, now = readClock()
  if stop then return stop end
  stop, storedSettings, expires, storedInc, wait = readSettings()
  if stop then return stop end
  stop, got, inc = readRing(now, storedSettings, expires, storedInc)
  if stop then return stop end
  if create == CREATE_SETTINGS then return writeSettings(got, storedSettings, expires, storedInc, inc) end
  local done, err = replay(5, field, tag, inc)
  if err then return err end
  if done then return done end
  local n = #found
  if n > 0 and wait == round then return REPLY_WAIT end
  stop, c = currentBucket(now)
  if stop then return stop end
  -- Only Create writes the root's settings (CREATE_SETTINGS), which never
  -- expire: a root ring without them is not made again by a call, since
  -- the window was never made, was dropped, or was lost, and a new one
  -- would answer the events it held new.
  if got == '' and create == CREATE_RING and root == PART_ROOT and not storedSettings then return REPLY_MISSING end
  -- The client wrote each slot's bit for the bucket it expected: in
  -- another, the bits are worked out here, and the answer tells it the
  -- bucket. Events the client found held come without their words: there
  -- the call cannot read them, and answers REPLY_REREAD and the bucket,
  -- writing nothing, for the client to read again. The later calls of its
  -- round wait, as after a REPLY_WAIT (startBucket).
  local fast = (c == expected)
  if n > 0 and not fast and nHeld > 0 then
    if storedSettings then redis.call('HSET', settings, 'wait', round) end
    return REPLY_REREAD .. c
  end

  -- Every check is done: from here on the script writes.
  writeKeys(now, got, storedSettings, expires, storedInc, inc)
  stop = startBucket(c)
  if stop then return stop end
  local res = n > 0 and answer(c, fast, found, bases, words) or ''
  cleanShare(now, c)
  writeState()
  remember(KEYS[5], field, tag, inc, res, keep)
  if n > 0 and not fast then return REPLY_MOVED .. c .. ':' .. res end
  return res
end

return window()
