-- stats: add one replica's counts of the last few seconds to the fleet's minute and hour
-- buckets (docs/design.md, "Fleet-wide view").
-- KEYS: 1 = {P:fleet}:stats:1m:<unix s of the minute> (hash field -> count),
--       2 = {P:fleet}:stats:1h:<unix s of the hour> (hash field -> count)
-- ARGV: 1 = unix ms at which KEYS[1] expires, 2 = unix ms at which KEYS[2] expires,
--       3.. = field, count pairs (fields from the bridge's own fixed set, never input;
--       counts are integers > 0)
-- returns: the number of fields added
-- Both keys get HINCRBY for every pair and their PEXPIREAT (the same every call for a
-- bucket, so a replica that stops leaves keys that go by themselves). One call per replica
-- every few seconds, whatever the traffic.
-- flags: none: on a full Redis the counts are refused and the replica keeps them for its
-- next call.
local n = 0
for i = 3, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
  n = n + 1
end
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
return n
