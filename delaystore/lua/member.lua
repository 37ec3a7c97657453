#!lua flags=allow-oom
-- member: heartbeat or leave of one replica in the fleet (docs/design.md, "Fleet").
-- KEYS: 1 = {P:fleet}:members (zset replica id -> unix ms until which it is live: the ids
--           that own shards), 2 = {P:fleet}:version (counter: the membership version),
--       3 = {P:fleet}:pending (zset replica id -> unix ms: joined, not yet confirmed),
--       4 = {P:fleet}:tokens (hash replica id -> the token its next heartbeat must show)
-- ARGV: 1 = replica id, 2 = ttl ms (>= 1: heartbeat) or -1 (leave),
--       3 = the version the caller knows, 4 = fleet channel (P:wake:fleet),
--       5 = the token of the caller's last answered heartbeat ('' when it has none)
-- returns: {now ms, version, token, confirmed 1/0, id1, id2, ...}: the live members (in no
-- particular order) only for a heartbeat when the version after the call differs from
-- ARGV[3].
-- A heartbeat is *confirmed* when it shows the token of the caller's previous answer: the
-- caller got that answer, so its connection works both ways. Only a confirmed heartbeat
-- adds the caller to the live members or renews it there (now + ttl). Any other heartbeat
-- (a first one, or one whose previous answer was lost or came too late) only gets a new
-- token and a pending entry: a replica whose answers stall keeps sending heartbeats that
-- reach Redis, but they do not keep it live, so its shards move to the others once its
-- entry expires. A leave removes the caller. Then every entry whose time is at or before
-- now (Redis TIME) is removed. When the live set changed (a join, a leave, an expiry) the
-- version is incremented and published on the fleet channel.
-- flags: allow-oom (first line, Redis >= 7): a full Redis (maxmemory, noeviction) must not
-- stop heartbeats, or every replica would lose its membership and stop claiming, and
-- claiming is what frees memory. It writes a few small members at most. Servers without
-- script flags (Redis 6, miniredis) run this source with the first line commented out
-- (delaystore/scripts.go).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local members, version, pending, tokens = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, ttl = ARGV[1], tonumber(ARGV[2])
local changed = false

-- prune removes the entries of zset whose time ran out, and their tokens unless the id is
-- still in other; it returns how many it removed.
local function prune(zset, other)
  local ids = redis.call('ZRANGEBYSCORE', zset, '-inf', string.format('%d', now))
  if #ids == 0 then return 0 end
  redis.call('ZREM', zset, unpack(ids))
  for i = 1, #ids do
    if not redis.call('ZSCORE', other, ids[i]) then redis.call('HDEL', tokens, ids[i]) end
  end
  return #ids
end

if prune(members, pending) > 0 then changed = true end
prune(pending, members)

local token, confirmed = '', 0
if ttl < 0 then
  if redis.call('ZREM', members, id) > 0 then changed = true end
  redis.call('ZREM', pending, id)
  redis.call('HDEL', tokens, id)
else
  token = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
  local expiry = string.format('%d', now + ttl)
  if ARGV[5] ~= '' and redis.call('HGET', tokens, id) == ARGV[5] then
    confirmed = 1
    if redis.call('ZADD', members, expiry, id) > 0 then changed = true end
    redis.call('ZREM', pending, id)
  elseif not redis.call('ZSCORE', members, id) then
    redis.call('ZADD', pending, expiry, id)
  end
  redis.call('HSET', tokens, id, token)
end

local v
if changed then
  v = redis.call('INCRBY', version, 1)
  redis.call('PUBLISH', ARGV[4], string.format('%d', v))
else
  v = tonumber(redis.call('GET', version) or '0')
end
local out = {now, v, token, confirmed}
if ttl >= 0 and string.format('%d', v) ~= ARGV[3] then
  local ids = redis.call('ZRANGE', members, 0, -1)
  for i = 1, #ids do out[#out + 1] = ids[i] end
end
return out
