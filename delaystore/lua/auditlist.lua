#!lua flags=no-writes
-- auditlist: read one page of the audit log, newest first (read-only).
-- KEYS: 1 = {P:audit}:z, 2 = {P:audit}:e, 3 = {P:audit}:s (audit.lua)
-- ARGV: 1 = cursor op id ('' at the start: the newest), 2 = most entries, 3 = retention ms
-- returns: {now ms, more (0|1), id1, start1, entry1, state1, id2, ...}: the entries after
-- the cursor entry (older, or as old with a smaller id), none older than the retention. A
-- cursor entry that is gone was dropped as the oldest: nothing older is left.
local z, e, s = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[2])
local start = 0
if ARGV[1] ~= '' then
  local r = redis.call('ZREVRANK', z, ARGV[1])
  if not r then return {now, 0} end
  start = r + 1
end
local got = redis.call('ZREVRANGE', z, start, start + n, 'WITHSCORES')
local oldest = now - tonumber(ARGV[3])
local out = {now, 0}
local ids = {}
for i = 1, #got, 2 do
  if tonumber(got[i + 1]) < oldest then break end
  if #ids == n then
    out[2] = 1
    break
  end
  ids[#ids + 1] = got[i]
  out[#out + 1] = got[i]
  out[#out + 1] = got[i + 1]
end
if #ids == 0 then return out end
local es = redis.call('HMGET', e, unpack(ids))
local ss = redis.call('HMGET', s, unpack(ids))
local res = {out[1], out[2]}
for i = 1, #ids do
  res[#res + 1] = ids[i]
  res[#res + 1] = out[2 + 2 * i]
  res[#res + 1] = es[i] or ''
  res[#res + 1] = ss[i] or ''
end
return res
