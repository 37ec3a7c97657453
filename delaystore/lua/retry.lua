#!lua flags=allow-oom
-- retry: reschedule claimed messages of one shard after a failed delivery.
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m
-- ARGV: per message 4 values: id, version, token, backoff ms
-- returns: {retried count, next head score or -1}
-- Same fence as ack (score == token and version matches); then attempts + 1 and
-- score = now + backoff (Redis TIME). The scheduled due time is kept.
-- flags: allow-oom (first line, Redis >= 7): runs while Redis refuses writes for memory, so a
-- failed delivery is rescheduled rather than stuck; it rewrites existing entries only (the
-- attempts counter may gain a digit). Without script flags (Redis 6, miniredis) the first
-- line is commented out (delaystore/scripts.go).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local z, m = KEYS[1], KEYS[2]
local n = 0
for i = 1, #ARGV, 4 do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', z, id)
  if score and tonumber(score) == tonumber(ARGV[i + 2]) then
    local env = redis.call('HGET', m, id)
    if env then
      local version, attempts, due = string.match(env, '^(%d+),(%d+),(%d+),')
      if version == ARGV[i + 1] then
        local prefixLen = #version + #attempts + #due + 3
        local attemptsStr = string.format('%d', tonumber(attempts) + 1)
        redis.call('HSET', m, id, version .. ',' .. attemptsStr .. ',' .. due .. ',' .. string.sub(env, prefixLen + 1))
        redis.call('ZADD', z, string.format('%d', now + tonumber(ARGV[i + 3])), id)
        n = n + 1
      end
    end
  end
end

local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] then nxt = tonumber(head[2]) end
return {n, nxt}
