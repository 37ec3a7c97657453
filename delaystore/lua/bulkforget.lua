#!lua flags=allow-oom
-- bulkforget: drop the progress of a finished resumable bulk operation in one shard.
-- KEYS: 1 = {P:s}:b (op id -> progress), 2 = {P:s}:bx (op id -> last write, ms)
-- ARGV: 1 = op id
-- returns: 1 when there was progress to drop, else 0
-- flags: allow-oom (first line, Redis >= 7): it frees memory.
local n = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return n
