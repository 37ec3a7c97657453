-- cancel: delete one message, pending or claimed.
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:r (retry set; the id leaves it)
-- ARGV: 1 = id
-- returns: 1 if it existed, else 0
local a = redis.call('ZREM', KEYS[1], ARGV[1])
local b = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if a + b > 0 then return 1 end
return 0
