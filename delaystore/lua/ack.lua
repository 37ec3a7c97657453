#!lua flags=allow-oom
-- ack: delete delivered messages, leaving tombstones of their source messages; one group
-- per shard (groups.lua). Per group: KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:tn (newer
--       tombstones: tombs.lua), 4 = {P:s}:r (retry set; a deleted id leaves it), 5 = {P:s}:n
--       (parked count per target: -1 per deleted entry), 6 = {P:s}:qt, 7 = the quota counter
--       hash (quota.lua), 8 = {P:s}:to (older tombstones)
--       ARGV: 1 = tombstone TTL ms (<= 0: none), 2 = read the head ('1') or not ('0': a claim
--       of the shard follows in the same round trip and reads it), then per message 3
--       values: id, version, token
-- returns: per group {acked count, next head score, -1 when empty, -2 when not read}
-- An entry is deleted only if its score still equals the claim token and its stored version
-- matches: a stale claim (lease expired and re-claimed, rescheduled, replaced) deletes nothing.
-- An entry whose header is unreadable has version 0 to its claimer (delaystore Corrupt, which
-- egress dead-letters and then acks): the token alone fences it.
-- A deleted entry whose body carries a source id leaves a tombstone of it for TTL (park then
-- drops a redelivery of that source message; tombs.lua: in the expiring sets).
-- The retry set is touched only when a deleted entry has attempts > 0 (only such entries
-- are in it: retry.lua adds an id with attempts + 1; park, bulk and a recurring firing
-- reset attempts only while taking the id out of it, or keep them).
-- flags: allow-oom (first line, Redis >= 7): runs while Redis refuses writes for memory, since
-- deleting delivered messages is what frees it (Redis 7 refuses any flagged script under OOM
-- that does not declare allow-oom); the tombstone it writes is smaller than the entry it
-- deletes. Without script flags (Redis 6, miniredis) the first line is commented out
-- (delaystore/scripts.go).
local CHUNK = 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

--!include envelope.lua

--!include tombs.lua

--!include groups.lua

--!include settled.lua

--!include quota.lua

local function shard(KEYS, ARGV)
  local z, m = KEYS[1], KEYS[2]
  local ttl = tonumber(ARGV[1])

  local n = 0
  local tombs = {} -- source ids of the deleted entries
  local deltas = {} -- target -> minus the deleted entries
  local ids = {}
  for i = 3, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
  for c = 1, #ids, CHUNK do
    local last = math.min(c + CHUNK - 1, #ids)
    local envs = redis.call('HMGET', m, unpack(ids, c, last))
    local scores = redis.call('ZMSCORE', z, unpack(ids, c, last))
    local del, seen, retried = {}, {}, false
    for j = 1, #envs do
      local k = c + j - 1
      local id = ids[k]
      local a = (k - 1) * 3 + 3
      local version, attempts, _, p = entry(envs[j] or '')
      if envs[j] and not seen[id] and (version or 0) == tonumber(ARGV[a + 1]) then
        local score = scores[j]
        if score and tonumber(score) == tonumber(ARGV[a + 2]) then
          del[#del + 1] = id
          seen[id] = true
          retried = retried or attempts ~= 0
          local src = p and sourceOf(envs[j], p, id) or ''
          if src ~= '' then tombs[#tombs + 1] = src end
          local tgt = p and targetOf(envs[j], p) or ''
          deltas[tgt] = (deltas[tgt] or 0) - 1
        end
      end
    end
    if #del > 0 then
      redis.call('ZREM', z, unpack(del))
      redis.call('HDEL', m, unpack(del))
      if retried then redis.call('ZREM', KEYS[4], unpack(del)) end
      n = n + #del
    end
  end

  if n > 0 then
    count(KEYS[5], deltas)
    quotaSettle(KEYS[6], KEYS[7], KEYS[5], deltas)
    tombAdd(KEYS[3], KEYS[8], tombs, ttl)
  end

  if ARGV[2] == '0' then return {n, -2} end
  return settled(z, n)
end

return groups(shard)
