#!lua flags=allow-oom
-- unpause: after a resume, give put-back messages of resumed targets their due time back,
-- in one shard (docs/design.md, "Paused targets").
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m
-- ARGV: 1 = the shard's wake channel (P:wake:<s>), 2 = the shard number, then per message
--       3 values: id, version and score read by scan
-- returns: the count re-scored.
-- A message is re-scored only when its version is the one read (fence: replaced,
-- cancelled or fired meanwhile: left alone), its score is still the one read, and that
-- score is odd and after now (waiting for a put-back or a retry: not in delivery, whose
-- score is even), below HELD (a held entry of an ordering key keeps waiting for its
-- predecessor) and after its due time. It is scored at its due time: claimed at once, in
-- due order. Version and attempts are kept. A wake "<shard>:<due>" is published when the
-- earliest new score is earlier than the shard's head before the call.
-- flags: allow-oom (first line, Redis >= 7): a score moves, nothing grows. Without script
-- flags the first line is commented out.
local z, m = KEYS[1], KEYS[2]
local HELD = 1125899906842625 -- 2^50 + 1 (delaystore.heldScore)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

--!include envelope.lua

local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
local earliest = nil
local n = 0
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', z, id)
  local sc = score and tonumber(score)
  if sc and sc == tonumber(ARGV[i + 2]) then
    if sc % 2 == 1 and sc > now and sc < HELD then
      local env = redis.call('HGET', m, id)
      if env then
        local version, _, due = entry(env)
        if version == tonumber(ARGV[i + 1]) and due < sc then
          redis.call('ZADD', z, string.format('%d', due), id)
          n = n + 1
          if not earliest or due < earliest then earliest = due end
        end
      end
    end
  end
end
if earliest and (#head == 0 or earliest < tonumber(head[2])) then
  redis.call('PUBLISH', ARGV[1], ARGV[2] .. ':' .. string.format('%d', earliest))
end
return n
