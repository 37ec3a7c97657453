#!lua flags=allow-oom
-- member: heartbeat or leave of one replica in the fleet (docs/design.md, "Fleet").
-- KEYS: 1 = {P:fleet}:members (zset replica id -> unix ms until which it is live),
--       2 = {P:fleet}:version (counter: the membership version)
-- ARGV: 1 = replica id, 2 = ttl ms (>= 1: heartbeat) or -1 (leave),
--       3 = the version the caller knows, 4 = fleet channel (P:wake:fleet)
-- returns: {now ms, version, id1, id2, ...}: the live members (in no particular order) only
-- for a heartbeat when the version after the call differs from ARGV[3], else {now, version}.
-- A heartbeat adds or renews the caller at now + ttl; a leave removes it; then every member
-- whose expiry is at or before now (Redis TIME) is removed. When the set changed (a join, a
-- leave, an expiry) the version is incremented and published on the fleet channel.
-- flags: allow-oom (first line, Redis >= 7): a full Redis (maxmemory, noeviction) must not
-- stop heartbeats, or every replica would lose its membership and stop claiming, and
-- claiming is what frees memory. It writes one zset member at most. Servers without script
-- flags (Redis 6, miniredis) run this source with the first line commented out
-- (delaystore/scripts.go).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local members, version = KEYS[1], KEYS[2]
local ttl = tonumber(ARGV[2])
local changed = false

-- Expired members first: a caller whose own entry lapsed leaves and joins again (others may
-- already have taken its shards).
if redis.call('ZREMRANGEBYSCORE', members, '-inf', string.format('%d', now)) > 0 then changed = true end
if ttl < 0 then
  if redis.call('ZREM', members, ARGV[1]) > 0 then changed = true end
else
  if redis.call('ZADD', members, string.format('%d', now + ttl), ARGV[1]) > 0 then changed = true end
end

local v
if changed then
  v = redis.call('INCRBY', version, 1)
  redis.call('PUBLISH', ARGV[4], string.format('%d', v))
else
  v = tonumber(redis.call('GET', version) or '0')
end
local out = {now, v}
if ttl >= 0 and string.format('%d', v) ~= ARGV[3] then
  local ids = redis.call('ZRANGE', members, 0, -1)
  for i = 1, #ids do out[#out + 1] = ids[i] end
end
return out
