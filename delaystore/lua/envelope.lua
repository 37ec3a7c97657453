-- envelope: functions on a stored envelope, shared by the scripts that read or write one.
-- A stored envelope is a binary header owned by the scripts (header, entry), then a body
-- encoded by Go (delaystore/envelope.go): its format byte (where the source id is: none 1,
-- the message id 2, a field 3), the source id field (format 3), flags, the target, the
-- source (without its broker prefix, or a code), then the bound field, key, headers and
-- hops as the flags say.
-- delaystore/scripts.go puts this file in place of the line "--!include envelope.lua" of a
-- script; it is not a script of its own.

-- uvarint returns the uvarint of s at index i and the index after it; nil when malformed
-- or longer than 8 bytes (a time in ms takes 6).
local function uvarint(s, i)
  local n, mul = 0, 1
  while true do
    local b = string.byte(s, i)
    if b == nil or mul > 562949953421312 then return nil, i end
    n = n + (b % 128) * mul
    i = i + 1
    if b < 128 then return n, i end
    mul = mul * 128
  end
end

-- field returns the uvarint-length-prefixed field of s at index i and the index after it;
-- nil when malformed.
local function field(s, i)
  local n
  n, i = uvarint(s, i)
  if n == nil or i + n - 1 > #s then return nil, i end
  return string.sub(s, i, i + n - 1), i + n
end

-- skip returns the index after the uvarint-length-prefixed field of s at index i; nil
-- when malformed.
local function skip(s, i)
  local n
  n, i = uvarint(s, i)
  if n == nil or i + n - 1 > #s then return nil end
  return i + n
end

-- STRUCT is Redis' struct library (in every Redis since 2.6): the binary header in one C
-- call each way. nil in an embedded Lua without it (miniredis: bridge dev, tests), which
-- takes the arithmetic below: the same bytes. Encoding the header with arithmetic and
-- string.char cost about as much Redis CPU as the rest of park's Lua per message.
local STRUCT = rawget(_G, 'struct')

-- entry returns the version, attempts and due (ms) of the stored envelope s as numbers
-- and the index of its body; nil when the header is malformed. The header is the byte 1,
-- then version in 6 bytes, attempts in 3, due in 6, big-endian; read without formatting a
-- number.
local function entry(s)
  if string.byte(s, 1) ~= 1 or #s < 16 then return nil end
  if STRUCT then
    local _, v, a, d, p = STRUCT.unpack('>BI6I3I6', s)
    return v, a, d, p
  end
  local v1, v2, v3, v4, v5, v6, a1, a2, a3, d1, d2, d3, d4, d5, d6 = string.byte(s, 2, 16)
  return ((((v1 * 256 + v2) * 256 + v3) * 256 + v4) * 256 + v5) * 256 + v6, (a1 * 256 + a2) * 256 + a3,
    ((((d1 * 256 + d2) * 256 + d3) * 256 + d4) * 256 + d5) * 256 + d6, 17
end

-- header returns the header of a stored envelope for version, attempts and due (numbers
-- >= 0; attempts at most 2^24 - 1, a negative due 0): see entry.
local function header(version, attempts, due)
  local v, a, d = version, attempts, due
  if a > 16777215 then a = 16777215 end
  if d < 0 then d = 0 end
  if STRUCT then return STRUCT.pack('>BI6I3I6', 1, v, a, d) end
  local v6 = v % 256
  v = (v - v6) / 256
  local v5 = v % 256
  v = (v - v5) / 256
  local v4 = v % 256
  v = (v - v4) / 256
  local v3 = v % 256
  v = (v - v3) / 256
  local v2 = v % 256
  local a3 = a % 256
  a = (a - a3) / 256
  local a2 = a % 256
  local d6 = d % 256
  d = (d - d6) / 256
  local d5 = d % 256
  d = (d - d5) / 256
  local d4 = d % 256
  d = (d - d4) / 256
  local d3 = d % 256
  d = (d - d3) / 256
  local d2 = d % 256
  return string.char(1, (v - v2) / 256 % 256, v2, v3, v4, v5, v6, (a - a2) / 256 % 256, a2, a3,
    (d - d2) / 256 % 256, d2, d3, d4, d5, d6)
end

-- bitOf returns bit k (0 = lowest) of the byte b.
local function bitOf(b, k)
  return math.floor(b / 2 ^ k) % 2
end

-- sourceOf returns the source id of the body of message id starting at index p of s: by
-- its format byte, none (1), the id itself (2), or a uvarint-length-prefixed field (3);
-- '' when none or malformed.
local function sourceOf(s, p, id)
  local f = string.byte(s, p)
  if f == 2 then return id end
  if f ~= 3 then return '' end
  return (field(s, p + 1)) or ''
end

-- targetOf returns the target field of the body starting at index p of s (the name
-- "broker:name", or the byte 0 and a code: an opaque key to the scripts): the field after
-- the format byte, the source id of format 3 and the flags; '' when malformed.
local function targetOf(s, p)
  local i = p + 1
  if string.byte(s, p) == 3 then
    i = skip(s, i)
    if not i then return '' end
  end
  return (field(s, i + 1)) or ''
end

-- afterSource returns, for the body starting at index p of s, the index of its flags
-- byte, the flags and the index after its source (where the bound field is, when flags
-- bit 0 says so); nil when malformed. It steps over source id, flags, target and source
-- (a few bytes read per field, nothing copied); a source held as a code (flags bit 7,
-- broker bits 0: delaystore/names.go) is a bare uvarint.
local function afterSource(s, p)
  local i = p + 1
  if string.byte(s, p) == 3 then i = skip(s, i) end
  if not i then return nil end
  local at, flags = i, string.byte(s, i)
  if not flags then return nil end
  local low = flags % 128
  i = skip(s, i + 1) -- target
  if i and flags >= 128 then
    if low % 16 >= 4 then return nil end
    local c
    c, i = uvarint(s, i) -- source code
    if not c then return nil end
  elseif i and low % 16 < 12 then
    i = skip(s, i) -- source (none when it is "http")
  end
  if not i then return nil end
  return at, flags, i
end

-- boundOf returns the max wait (ms), the bound (unix ms: due by) and the index after the
-- bound field of the body starting at index p of s (flags bit 0, delaystore/envelope.go
-- flagBound: a debounced message); nil when it has none or is malformed. A body without
-- one costs two byte reads (its format and flags), every other field is left unread.
local function boundOf(s, p)
  local at = p + 1
  if string.byte(s, p) == 3 then at = skip(s, at) end
  local f = at and string.byte(s, at)
  if not f or f % 2 == 0 then return nil end
  local _, flags, i = afterSource(s, p)
  if not flags then return nil end
  local mw, by
  mw, i = uvarint(s, i)
  if not mw or mw == 0 then return nil end
  by, i = uvarint(s, i)
  if not by then return nil end
  return mw, by, i
end

-- uvarintOf encodes n (an integer >= 0, < 2^53) as a uvarint.
local function uvarintOf(n)
  local b = {}
  while n >= 128 do
    local low = n % 128
    b[#b + 1] = low + 128
    n = (n - low) / 128
  end
  b[#b + 1] = n
  return string.char(unpack(b))
end

-- withBound returns the body s (starting at index 1) with its bound field set to max wait
-- mw and bound by (ms): the field rewritten when s has one, else flags bit 0 set and the
-- field put after the source. s itself when malformed (never written so: park.lua only
-- calls it on bodies Go encoded).
local function withBound(s, mw, by)
  local at, flags, i = afterSource(s, 1)
  if not flags then return s end
  local f = uvarintOf(mw) .. uvarintOf(by)
  if flags % 2 == 1 then
    local _, _, j = boundOf(s, 1)
    if not j then return s end
    return string.sub(s, 1, i - 1) .. f .. string.sub(s, j)
  end
  return string.sub(s, 1, at - 1) .. string.char(flags + 1) .. string.sub(s, at + 1, i - 1) .. f .. string.sub(s, i)
end

-- headersAt returns the index of the header count of the body starting at index p of s;
-- nil when it has no header list or is malformed. It steps over source id, flags,
-- target, source (afterSource), the bound field and key.
local function headersAt(s, p)
  local _, flags, i = afterSource(s, p)
  if not flags then return nil end
  if flags % 2 == 1 then -- the bound field: max wait, due by
    local mw
    mw, i = uvarint(s, i)
    if mw then mw, i = uvarint(s, i) end
    if not mw then return nil end
  end
  if i and bitOf(flags, 4) == 1 then i = skip(s, i) end -- key
  if not i or bitOf(flags, 5) == 0 then return nil end
  return i
end

-- recurring reports whether the body starting at index p of s is a recurring message's:
-- its last header is the schedule (delaystore/envelope.go: metaEvery, the last meta
-- header; the hops count is not in the list). False when malformed.
local function recurring(s, p)
  local i = headersAt(s, p)
  if not i then return false end
  local n
  n, i = uvarint(s, i)
  if not n or n == 0 then return false end
  local last
  for _ = 1, n do
    last = i
    i = skip(s, i) -- key
    if i then i = skip(s, i) end -- value
    if not i then return false end
  end
  local key = field(s, last)
  return key == '_delaybridge_every'
end

-- sentOf returns the source time (ms) stored with the body starting at index p of s (the
-- reserved header _delaybridge_sent, the first of the trailing meta headers, written for
-- messages parked with replace: delaystore/envelope.go metaSent), or nil when it has none
-- or is malformed.
local function sentOf(s, p)
  local i = headersAt(s, p)
  if not i then return nil end
  local n
  n, i = uvarint(s, i)
  if not n then return nil end
  for _ = 1, n do
    local key, value
    key, i = field(s, i)
    if key == nil then return nil end
    value, i = field(s, i)
    if value == nil then return nil end
    if key == '_delaybridge_sent' then return tonumber(value) end
  end
  return nil
end

-- count adds deltas (target -> signed count) to the shard's parked counts per target
-- (hash key n; the field '' is its "complete" mark, never a target): a target whose count
-- reaches 0 or less loses its field, so the hash holds the targets that have messages.
local function count(n, deltas)
  for target, d in pairs(deltas) do
    if d ~= 0 and target ~= '' then
      if redis.call('HINCRBY', n, target, d) <= 0 then redis.call('HDEL', n, target) end
    end
  end
end
