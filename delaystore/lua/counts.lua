-- counts: count a shard's parked messages per target from its entries, when its counts are
-- not marked complete (a store written by a version that kept none) or when asked to.
-- KEYS: 1 = {P:s}:m (hash id -> stored envelope), 2 = {P:s}:n (target -> parked count; the
--       field '' marks it complete)
-- ARGV: 1 = '1' to count again even when marked complete, else '0'
-- returns: 1 when it counted, 0 when the counts were complete already
-- park, ack, cancel and bulk keep the counts from then on; this run replaces them with what
-- the entries say, in one step, so it is exact whatever ran before it. It reads every entry
-- of the shard: about 3 us each, once per store (or per recount).
-- flags: none: on a full Redis its writes are refused and the counts stay as they were.

--!include envelope.lua

if ARGV[1] ~= '1' and redis.call('HEXISTS', KEYS[2], '') == 1 then return 0 end
local counts, seen = {}, {} -- seen: HSCAN may return an entry twice
local cursor = '0'
repeat
  local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 1000)
  cursor = page[1]
  local kv = page[2]
  for i = 2, #kv, 2 do
    if not seen[kv[i - 1]] then
      seen[kv[i - 1]] = true
      local p = select(4, entry(kv[i]))
      local tgt = p and targetOf(kv[i], p) or ''
      if tgt ~= '' then counts[tgt] = (counts[tgt] or 0) + 1 end
    end
  end
until cursor == '0'
local old = redis.call('HKEYS', KEYS[2]) -- emptied field by field: the bridge's ACL has no DEL
for i = 1, #old, 1000 do
  redis.call('HDEL', KEYS[2], unpack(old, i, math.min(i + 999, #old)))
end
local fields = {'', '1'}
for tgt, c in pairs(counts) do
  fields[#fields + 1] = tgt
  fields[#fields + 1] = string.format('%d', c)
end
for i = 1, #fields, 1000 do
  redis.call('HSET', KEYS[2], unpack(fields, i, math.min(i + 999, #fields)))
end
return 1
