-- ack: delete delivered messages of one shard.
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:r (retry set; a deleted id leaves it)
-- ARGV: per message 3 values: id, version, token
-- returns: {acked count, next head score or -1}
-- An entry is deleted only if its score still equals the claim token and its stored version
-- matches: a stale claim (lease expired and re-claimed, rescheduled, replaced) deletes nothing.
local z, m = KEYS[1], KEYS[2]
local CHUNK = 1000
local n = 0
local ids = {}
for i = 1, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
for c = 1, #ids, CHUNK do
  local last = math.min(c + CHUNK - 1, #ids)
  local envs = redis.call('HMGET', m, unpack(ids, c, last))
  local del, seen = {}, {}
  for j = 1, #envs do
    local k = c + j - 1
    local id = ids[k]
    local a = (k - 1) * 3 + 1
    if envs[j] and not seen[id] and string.match(envs[j], '^(%d+),') == ARGV[a + 1] then
      local score = redis.call('ZSCORE', z, id)
      if score and tonumber(score) == tonumber(ARGV[a + 2]) then
        del[#del + 1] = id
        seen[id] = true
      end
    end
  end
  if #del > 0 then
    redis.call('ZREM', z, unpack(del))
    redis.call('HDEL', m, unpack(del))
    redis.call('ZREM', KEYS[3], unpack(del))
    n = n + #del
  end
end

local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] then nxt = tonumber(head[2]) end
return {n, nxt}
