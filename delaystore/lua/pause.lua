#!lua flags=allow-oom
-- pause: pause or resume one target glob for the whole fleet (docs/design.md, "Paused
-- targets").
-- KEYS: 1 = {P:pause} (glob -> 'p,<paused ms>' while paused, 'r,<paused ms>,<resumed ms>'
--       after a resume)
-- ARGV: 1 = op ('p' pause | 'r' resume), 2 = the glob (already checked by the caller),
--       3 = most paused globs, 4 = most fields, 5 = how long a resumed field is kept (ms),
--       6 = the fleet channel (P:wake:fleet), told 'pause' after a change: every replica
--       reads the set again at once
-- returns: {answer, now ms, paused ms}: answer 1 = changed (paused, or resumed),
-- 0 = nothing to do (already paused, or not paused: paused ms 0 then), -1 = refused: as
-- many globs paused, or fields kept, as allowed.
-- Resumed fields older than ARGV[5] are deleted first, so the hash stays bounded by
-- ARGV[4] whatever the calls. A pause of a glob that was resumed replaces that field.
-- flags: allow-oom (first line, Redis >= 7): resuming must work on a full Redis; a pause
-- writes one small field. Without script flags the first line is commented out.
local key, op, glob = KEYS[1], ARGV[1], ARGV[2]
local maxPaused, maxFields, keep = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local all = redis.call('HGETALL', key)
local paused, fields = 0, 0
for i = 1, #all, 2 do
  local v = all[i + 1]
  if string.sub(v, 1, 1) == 'r' then
    local resumed = tonumber(string.match(v, ',(%d+)$'))
    if not resumed or resumed + keep < now then
      redis.call('HDEL', key, all[i])
    else
      fields = fields + 1
    end
  else
    paused = paused + 1
    fields = fields + 1
  end
end

local cur = redis.call('HGET', key, glob)
local isPaused = cur and string.sub(cur, 1, 1) == 'p'
local since = 0
if isPaused then since = tonumber(string.match(cur, '^p,(%d+)')) or 0 end

if op == 'p' then
  if isPaused then return {0, now, since} end
  if paused >= maxPaused or (not cur and fields >= maxFields) then return {-1, now, 0} end
  redis.call('HSET', key, glob, 'p,' .. now)
  redis.call('PUBLISH', ARGV[6], 'pause')
  return {1, now, now}
end
if not isPaused then return {0, now, 0} end
redis.call('HSET', key, glob, 'r,' .. since .. ',' .. now)
redis.call('PUBLISH', ARGV[6], 'pause')
return {1, now, since}
