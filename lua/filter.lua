-- filter.lua: the part every write script shares. scripts.go sends it in
-- front of add.lua and remove.lua, so that each of them is one Redis script.
--
-- A filter partition is one Redis string: a 64-byte header, then the slots
-- (the layout is documented in header.go). Redis does not roll a script back when it
-- fails half-way, so the functions here only read, and every script checks
-- all of its arguments with them before its first write.

local HEADER = 64
local MAX_ARGS = 7000 -- unpack() fails past about 8000 values
local RESERVED = string.rep('\0', 15) -- header bytes 50-64

local function reject(code, msg)
  return redis.error_reply('RBLOOM_' .. code .. ' ' .. msg)
end

-- int returns s as a whole number in [lo, hi], or nil.
local function int(s, lo, hi)
  local v = tonumber(s)
  if v and v % 1 == 0 and v >= lo and v <= hi then return v end
  return nil
end

local function be(s, i, j)
  local v = 0
  for p = i, j do v = v * 256 + string.byte(s, p) end
  return v
end

-- parse checks a header and returns its fields, or nil and why not.
local function parse(h)
  if #h ~= HEADER or string.sub(h, 1, 6) ~= 'rbloom' then
    return nil, 'no rbloom header'
  end
  if string.byte(h, 7) ~= 1 then
    return nil, 'format version ' .. string.byte(h, 7) .. ', this script reads 1'
  end
  if string.sub(h, 10, 12) ~= '\0\0\0' or string.sub(h, 50) ~= RESERVED then
    return nil, 'reserved header bytes are not zero'
  end
  local f = {mode = string.sub(h, 8, 8), k = string.byte(h, 9), m = be(h, 13, 16)}
  f.width = (f.mode == 'c' and 4) or (f.mode == 'b' and 1) or nil
  if not f.width then return nil, 'unknown mode' end
  if f.k < 1 or f.k > 64 then return nil, 'k = ' .. f.k .. ' outside 1..64' end
  if f.m < 1 or f.m * f.width > (512 * 1024 * 1024 - HEADER) * 8 then
    return nil, 'm = ' .. f.m .. ' does not fit in a Redis string'
  end
  local parts, index = be(h, 17, 20), be(h, 21, 24)
  if parts < 1 or parts > 1024 or index >= parts then
    return nil, 'partition ' .. index .. ' of ' .. parts
  end
  f.size = HEADER + math.ceil(f.m * f.width / 8)
  return f
end

-- open compares the filter stored at key with f, parsed from the header
-- the caller expects. It returns true and the stored header if the filter
-- exists, false if the key does not, or nil and an error reply.
local function open(key, f, header)
  local head = redis.pcall('GETRANGE', key, 0, HEADER - 1)
  if type(head) == 'table' then
    -- Only WRONGTYPE says what the key holds; pass any other error on (an
    -- ACL refusal must not make a healthy filter look like something else).
    if string.find(head.err, 'WRONGTYPE', 1, true) then
      return nil, reject('NOTFILTER', key .. ' holds another type')
    end
    return nil, head
  end
  if head == '' then
    if redis.call('EXISTS', key) == 1 then
      return nil, reject('NOTFILTER', key .. ' holds an empty string')
    end
    return false
  end
  if string.sub(head, 1, 24) ~= string.sub(header, 1, 24) then
    local have, why = parse(head)
    if not have then return nil, reject('NOTFILTER', key .. ': ' .. why) end
    return nil, reject('MISMATCH', key .. ' is ' .. have.mode .. ' m=' .. have.m ..
      ' k=' .. have.k .. ', caller wants ' .. f.mode .. ' m=' .. f.m .. ' k=' .. f.k)
  end
  if #head < HEADER or redis.call('STRLEN', key) ~= f.size then
    return nil, reject('DAMAGED', key .. ': its length is not ' .. f.size)
  end
  if string.sub(head, 50) ~= RESERVED then
    return nil, reject('NOTFILTER', key .. ': reserved header bytes are not zero')
  end
  return true, head
end

-- copyOf returns KEYS[3] when the partition whose header is head is being
-- rebuilt into it (header byte 49 is 1, set by rebuild.lua) and it holds a
-- copy of the same identity: every write then goes to both. It returns nil
-- otherwise, or nil and an error reply.
local function copyOf(head, f, header)
  if not head or string.byte(head, 49) ~= 1 then return nil end
  local exists, res = open(KEYS[3], f, header)
  if exists == nil then return nil, res end -- res is an error reply
  if exists then return KEYS[3] end
  return nil
end

-- slots checks ARGV[first..] as k groups per item of op, type, offset,
-- value, and returns the number of items, or nil and an error reply. Every
-- offset must be the first bit of one of the m slots, so that BITFIELD can
-- never grow the string or touch the header. Offsets that tonumber reads
-- but BITFIELD would not ("0x200", " 512") make the BITFIELD call itself
-- fail, before it writes anything. This loop is the hot path of every write:
-- globals are bound to locals, and nothing is allocated.
local function slots(f, first, op, typ, value)
  local a, num = ARGV, tonumber
  local last = #a
  local n = last - first + 1
  if n > MAX_ARGS or n % (4 * f.k) ~= 0 then
    return nil, reject('ARGS', n .. ' slot arguments: not a multiple of ' .. 4 * f.k)
  end
  local lo, hi, w = HEADER * 8, HEADER * 8 + (f.m - 1) * f.width, f.width
  for i = first, last, 4 do
    local o = num(a[i + 2])
    if a[i] ~= op or a[i + 1] ~= typ or a[i + 3] ~= value
      or not o or o < lo or o > hi or o % w ~= 0 then
      return nil, reject('ARGS', 'ARGV[' .. i .. '..' .. (i + 3) .. '] is not a ' .. op .. ' of a slot')
    end
  end
  return n / (4 * f.k)
end
