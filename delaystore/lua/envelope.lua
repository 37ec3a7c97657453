-- envelope: functions on a stored envelope "<version>,<attempts>,<due>,<body>" (the body as
-- delaystore/envelope.go writes it), shared by park, ack, cancel and bulk.
-- delaystore/scripts.go puts this file in place of the line "--!include envelope.lua" of a
-- script; it is not a script of its own.

-- uvarint returns the uvarint of s at index i and the index after it; nil when malformed.
local function uvarint(s, i)
  local n, mul = 0, 1
  while true do
    local b = string.byte(s, i)
    if b == nil or mul > 268435456 then return nil, i end
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

-- sourceOf returns the source id of the body of message id starting at index p of s: by
-- its format byte, none (1), the id itself (2), or a uvarint-length-prefixed field (3); ''
-- when none or malformed.
local function sourceOf(s, p, id)
  local f = string.byte(s, p)
  if f == 2 then return id end
  if f ~= 3 then return '' end
  return (field(s, p + 1)) or ''
end

-- targetOf returns the target ("broker:name") of the body starting at index p of s: the
-- field after the format byte and, with format 3, the source id; '' when malformed.
local function targetOf(s, p)
  local i = p + 1
  if string.byte(s, p) == 3 then
    local _
    _, i = field(s, i)
    if _ == nil then return '' end
  end
  return (field(s, i)) or ''
end

-- recurring reports whether the body starting at index p of s is a recurring message's:
-- its last header is the schedule (delaystore/envelope.go: metaEvery, the last meta
-- header). It steps over source id, target, source, key and the header pairs (a few
-- bytes read per field, nothing copied but the last key); false when malformed.
local function recurring(s, p)
  local i = p + 1
  if string.byte(s, p) == 3 then i = skip(s, i) end
  if i then i = skip(s, i) end -- target
  if i then i = skip(s, i) end -- source
  if not i then return false end
  local flag = string.byte(s, i)
  i = i + 1
  if flag == 1 then i = skip(s, i) elseif flag ~= 0 then return false end
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
-- or is malformed. It steps over the fields as recurring does.
local function sentOf(s, p)
  local i = p + 1
  if string.byte(s, p) == 3 then i = skip(s, i) end
  if i then i = skip(s, i) end -- target
  if i then i = skip(s, i) end -- source
  if not i then return nil end
  local flag = string.byte(s, i)
  i = i + 1
  if flag == 1 then i = skip(s, i) elseif flag ~= 0 then return nil end
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
