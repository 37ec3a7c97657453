#!lua flags=allow-oom
-- claim: lease the due messages of shards; one group per shard (groups.lua).
-- Per group: KEYS: 1 = {P:s}:z, 2 = {P:s}:m; ARGV: 1 = lease ms, 2 = max messages
-- returns: per group {now ms, token, next head score or -1, id1, env1, id2, env2, ...}
-- Members with score <= now (Redis TIME) are re-scored to token = now + lease and returned
-- with their stored envelope; a member without envelope is removed.
-- flags: allow-oom (first line, Redis >= 7): runs while Redis refuses writes for memory
-- (maxmemory reached, noeviction). It only re-scores existing members (ZADD XX) and removes
-- orphans, so it needs no new memory, and delivering is what frees memory: refused, it would
-- deadlock a full Redis. Servers without script flags (Redis 6, miniredis) run this source
-- with the first line commented out (delaystore/scripts.go); there a full Redis refuses it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local CHUNK = 1000 -- values per variadic call; even, so pairs stay together

--!include groups.lua

local function shard(KEYS, ARGV)
  local z, m = KEYS[1], KEYS[2]
  local token = now + tonumber(ARGV[1])
  local tokenStr = string.format('%d', token)
  local out = {now, token, -1}
  local ids = redis.call('ZRANGEBYSCORE', z, '-inf', string.format('%d', now), 'LIMIT', 0, tonumber(ARGV[2]))
  for i = 1, #ids, CHUNK do
    local last = math.min(i + CHUNK - 1, #ids)
    local envs = redis.call('HMGET', m, unpack(ids, i, last))
    local zadd, orphans = {}, {}
    for j = 1, #envs do
      local id = ids[i + j - 1]
      if envs[j] then
        zadd[#zadd + 1] = tokenStr
        zadd[#zadd + 1] = id
        out[#out + 1] = id
        out[#out + 1] = envs[j]
      else
        orphans[#orphans + 1] = id
      end
    end
    if #zadd > 0 then redis.call('ZADD', z, 'XX', unpack(zadd)) end
    if #orphans > 0 then redis.call('ZREM', z, unpack(orphans)) end
  end
  local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if head[2] then out[3] = tonumber(head[2]) end
  return out
end

return groups(shard)
