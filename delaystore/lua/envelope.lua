-- envelope: functions on a stored envelope "<version>,<attempts>,<due>,<body>" (the body as
-- delaystore/envelope.go writes it), shared by park, ack and cancel. delaystore/scripts.go
-- puts this file in place of the line "--!include envelope.lua" of a script; it is not a
-- script of its own.

-- sourceOf returns the source id of the body of message id starting at index p of s: by
-- its format byte, none (1), the id itself (2), or a uvarint-length-prefixed field (3); ''
-- when none or malformed.
local function sourceOf(s, p, id)
  local f = string.byte(s, p)
  if f == 2 then return id end
  if f ~= 3 then return '' end
  local n, mul, i = 0, 1, p + 1
  while true do
    local b = string.byte(s, i)
    if b == nil or mul > 268435456 then return '' end
    n = n + (b % 128) * mul
    i = i + 1
    if b < 128 then break end
    mul = mul * 128
  end
  return string.sub(s, i, i + n - 1)
end
