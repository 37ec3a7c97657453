#!lua flags=allow-oom
-- cancel: delete one message, pending or claimed, leaving a tombstone of its source message.
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:t (zset source id -> tombstone expiry ms),
--       4 = {P:s}:r (retry set; the id leaves it), 5 = {P:s}:n (parked count per target)
-- ARGV: 1 = id, 2 = tombstone TTL ms (<= 0: none)
-- returns: 1 if it existed, else 0
-- A deleted entry whose body carries a source id leaves the tombstone source id -> now + TTL,
-- as ack does: a redelivery of the cancelled source message is not parked again.
-- flags: allow-oom (first line, Redis >= 7): a cancel frees memory, so it runs while Redis
-- refuses writes for memory. Without script flags (Redis 6, miniredis) the first line is
-- commented out (delaystore/scripts.go).

--!include envelope.lua

local env = redis.call('HGET', KEYS[2], ARGV[1])
local a = redis.call('ZREM', KEYS[1], ARGV[1])
local b = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local p = env and string.match(env, '^%d+,%d+,%d+,()')
if p then count(KEYS[5], {[targetOf(env, p)] = -1}) end
if env and tonumber(ARGV[2]) > 0 then
  local src = p and sourceOf(env, p, ARGV[1]) or ''
  if src ~= '' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[3], string.format('%d', now + tonumber(ARGV[2])), src)
  end
end
if a + b > 0 then return 1 end
return 0
