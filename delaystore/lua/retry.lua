#!lua flags=allow-oom
-- retry: reschedule claimed messages after a failed delivery, put them back, or end the
-- firing of a recurring message by parking it for its next occurrence; one group per shard
-- (groups.lua). Per group: KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:r (retry set: id -> due as scheduled),
--       4 = {P:s}:seq (version counter), 5 = {P:s}:ki (keyed entries: chain.lua)
-- ARGV: per message 5 values: id, version, token, backoff ms or next due ms, mode
--       ('1' | '0' | 'n')
-- returns: per group {applied count, next head score or -1}
-- Same fence as ack (score == token and version matches). mode '1' (a failed publish):
-- score = now + backoff (Redis TIME), attempts + 1, and the id enters the retry set with
-- its due time. mode '0' (put back unpublished: the target is at its in-flight limit):
-- only the score moves to now + backoff. The scheduled due time is kept in both, and the
-- score is made odd (+1 ms when even): an even score marks a claim (claim.lua), and an
-- entry waiting for its next attempt is in no replica's hands (cancel.lua deletes it). mode 'n'
-- (the firing of a recurring message was published or dead-lettered): the entry becomes
-- the next firing (new version, attempts 0, the next due, the same body), scored at the next due, out of the
-- retry set: acking a firing and parking the next one is this one write, so no moment
-- exists where the message is gone or twice there. No tombstone: the message lives on.
-- A keyed entry fenced out by a newer version while its score is still the token was
-- replaced in delivery (park.lua kept the token): the replaced version is settled, so the
-- new one is re-scored to its due time (as ack.lua does).
-- flags: allow-oom (first line, Redis >= 7): runs while Redis refuses writes for memory, so a
-- failed delivery is rescheduled rather than stuck; it rewrites existing entries and adds the id to
-- the retry set (tens of bytes). Without script flags (Redis 6, miniredis) the first
-- line is commented out (delaystore/scripts.go).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

--!include envelope.lua

--!include groups.lua

--!include settled.lua

local function shard(KEYS, ARGV)
  local z, m, r = KEYS[1], KEYS[2], KEYS[3]
  local n = 0
  for i = 1, #ARGV, 5 do
    local id = ARGV[i]
    local score = redis.call('ZSCORE', z, id)
    if score and tonumber(score) == tonumber(ARGV[i + 2]) then
      local env = redis.call('HGET', m, id)
      if env then
        local version, attempts, due, p = entry(env)
        if version and version > tonumber(ARGV[i + 1]) and redis.call('HEXISTS', KEYS[5], id) == 1 then
          redis.call('ZADD', z, string.format('%d', due), id)
        elseif version == tonumber(ARGV[i + 1]) then
          local mode = ARGV[i + 4]
          if mode == 'n' then
            local v = redis.call('INCR', KEYS[4])
            redis.call('HSET', m, id, header(v, 0, tonumber(ARGV[i + 3])) .. string.sub(env, p))
            redis.call('ZREM', r, id)
            redis.call('ZADD', z, ARGV[i + 3], id)
          else
            if mode == '1' then
              redis.call('HSET', m, id, header(version, attempts + 1, due) .. string.sub(env, p))
              redis.call('ZADD', r, string.format('%d', due), id)
            end
            local at = now + tonumber(ARGV[i + 3])
            if at % 2 == 0 then at = at + 1 end -- odd: not claimed
            redis.call('ZADD', z, string.format('%d', at), id)
          end
          n = n + 1
        end
      end
    end
  end

  return settled(z, n)
end

return groups(shard)
