#!lua flags=allow-oom
-- ack: delete delivered messages, leaving tombstones of their source messages; one group
-- per shard (groups.lua). Per group: KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:tn (newer
--       tombstones: tombs.lua), 4 = {P:s}:r (retry set; a deleted id leaves it), 5 = {P:s}:n
--       (parked count per target: -1 per deleted entry), 6 = {P:s}:qt, 7 = the quota counter
--       hash (quota.lua), 8 = {P:s}:to (older tombstones), 9 = {P:s}:k (the chains of
--       ordering keys: chain.lua), 10 = {P:s}:ki (keyed entries), 11 = {P:s}:nm (the
--       shard's interned names)
--       ARGV: 1 = tombstone TTL ms (<= 0: none), 2 = read the head ('1') or not ('0': a claim
--       of the shard follows in the same round trip and reads it), 3 = lease ms of the
--       released messages ('0': none leased), 4 = the generation of the caller's table of
--       the shard's names (claim.lua ARGV[4]), then per message 3 values: id, version, token
-- returns: per group {acked count, next head score, -1 when empty, -2 when not read
-- [, token, now, id1, env1, released1, id2, ...]}: the released messages leased (when
-- ARGV[3] > 0, each released next message of an ordering key that is due by now is leased
-- at once, scored token as a claim would, so that the caller delivers it without a claim
-- round trip: chain.lua chainLease; released: its release time, 0 when not late)
-- An entry is deleted only if its score still equals the claim token and its stored version
-- matches: a stale claim (lease expired and re-claimed, rescheduled, replaced) deletes nothing.
-- A deleted keyed entry leaves its chain in the same call, releasing the next of its key
-- when it was the head (chain.lua). A keyed entry whose score is still the token but whose
-- version is newer was replaced while in delivery (park.lua kept the token): the replaced
-- version is confirmed, so the new one is re-scored to its due time.
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

--!include chain.lua

-- settleChains takes the deleted keyed entries (gone) out of their chains and re-scores
-- the keyed entries replaced in delivery (swapped: {id, due}) to their due time.
-- With leaseMS > 0 it leases the released ones that are due (chainLease: nm, gen) and
-- returns the lease; a shard without keyed entries costs one EXISTS.
local function settleChains(z, m, kz, ki, gone, swapped, nm, leaseMS, gen)
  local ids = {}
  for _, id in ipairs(gone) do ids[#ids + 1] = id end
  for _, r in ipairs(swapped) do ids[#ids + 1] = r[1] end
  local vals = chainValues(ki, ids)
  if vals == nil then return nil end
  local lease
  if leaseMS > 0 then lease = chainLease(nm, leaseMS, gen) end
  chainSettle(z, m, kz, ki, gone, vals, lease)
  for i, r in ipairs(swapped) do
    if vals[#gone + i] then redis.call('ZADD', z, 'XX', string.format('%d', r[2]), r[1]) end
  end
  return lease
end

local function shard(KEYS, ARGV)
  local z, m = KEYS[1], KEYS[2]
  local ttl = tonumber(ARGV[1])

  local n = 0
  local tombs = {} -- source ids of the deleted entries
  local deltas = {} -- target -> minus the deleted entries
  local ids = {}
  local gone, swapped = {}, {} -- ids deleted; {id, due} of keyed entries replaced in delivery
  for i = 5, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
  for c = 1, #ids, CHUNK do
    local last = math.min(c + CHUNK - 1, #ids)
    local envs = redis.call('HMGET', m, unpack(ids, c, last))
    local scores = redis.call('ZMSCORE', z, unpack(ids, c, last))
    local del, seen, retried = {}, {}, false
    for j = 1, #envs do
      local k = c + j - 1
      local id = ids[k]
      local a = (k - 1) * 3 + 5
      local version, attempts, due, p = entry(envs[j] or '')
      local score = scores[j]
      if envs[j] and not seen[id] and version and version > tonumber(ARGV[a + 1]) and score and
          tonumber(score) == tonumber(ARGV[a + 2]) then
        swapped[#swapped + 1] = {id, due}
      elseif envs[j] and not seen[id] and (version or 0) == tonumber(ARGV[a + 1]) then
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
      for _, id in ipairs(del) do gone[#gone + 1] = id end
    end
  end

  local lease = settleChains(z, m, KEYS[9], KEYS[10], gone, swapped, KEYS[11], tonumber(ARGV[3]), ARGV[4])
  if n > 0 then
    count(KEYS[5], deltas)
    quotaSettle(KEYS[6], KEYS[7], KEYS[5], deltas)
    tombAdd(KEYS[3], KEYS[8], tombs, ttl)
  end

  local out = {n, -2}
  if ARGV[2] ~= '0' then out = settled(z, n) end
  if lease and #lease.out > 0 then
    out[3], out[4] = tonumber(lease.token), now
    for i = 1, #lease.out do out[4 + i] = lease.out[i] end
  end
  return out
end

return groups(shard)
