#!lua flags=allow-oom
-- tails: one replica's record of whether it has live-event tails (docs/design.md "Live
-- events"), and whether any other replica has.
-- KEYS: 1 = {P:fleet}:tails (zset relay id -> unix ms until which it has tails)
-- ARGV: 1 = relay id, 2 = '1' (has tails) or '0', 3 = ttl ms
-- returns: 1 when another relay has tails, else 0
-- Entries at or before now (Redis TIME) are removed first; the key expires with its
-- latest entry, so an idle fleet leaves nothing behind.
-- flags: allow-oom (first line, Redis >= 7): a few bytes per tailing replica; servers
-- without script flags run it with the first line commented out (delaystore/scripts.go).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, id, ttl = KEYS[1], ARGV[1], tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local n
if ARGV[2] == '1' then
  redis.call('ZADD', key, now + ttl, id)
  redis.call('PEXPIRE', key, ttl)
  n = redis.call('ZCARD', key) - 1
else
  redis.call('ZREM', key, id)
  n = redis.call('ZCARD', key)
end
if n > 0 then
  return 1
end
return 0
