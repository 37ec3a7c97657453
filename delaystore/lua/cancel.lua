#!lua flags=allow-oom
-- cancel: delete one message, pending or claimed.
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m
-- ARGV: 1 = id
-- returns: 1 if it existed, else 0
-- flags: allow-oom (first line, Redis >= 7): a cancel frees memory, so it runs while Redis
-- refuses writes for memory. Without script flags (Redis 6, miniredis) the first line is
-- commented out (delaystore/scripts.go).
local a = redis.call('ZREM', KEYS[1], ARGV[1])
local b = redis.call('HDEL', KEYS[2], ARGV[1])
if a + b > 0 then return 1 end
return 0
