-- tombs: tombstones of delivered or cancelled source messages, shared by park, ack, cancel
-- and bulk. t is the shard's key {P:s}:t. Where a tombstone goes follows the entry it
-- stands for (envelope.lua compactAt):
-- - compact entries (stores marked compact): a member (the source id) of the SET t .. 'n'
--   ({P:s}:tn, the newer generation) or t .. 'o' ({P:s}:to, the older one). The newer set
--   is created with an expiry of 2 x TTL + TTL / 2 and takes tombstones while younger than
--   TTL; the first write after that moves it to the older name (RENAME, after UNLINK of
--   the older set, whose tombstones are then at least 2 x TTL old: freed off the main
--   thread) and starts a new one. So each tombstone lives at least TTL and at most
--   2.5 x TTL (2 x TTL while deliveries go on), Redis deletes idle sets by their expiry,
--   and nothing sweeps: a set entry costs about half a sorted-set entry. park checks both
--   sets (two SMISMEMBER per chunk). Key names are fixed, never from input or the clock.
-- - other entries: the ZSET t, source id -> until ms, as every version wrote it; ack
--   prunes expired ones (tombPrune).
-- Uses the script's now (Redis TIME, ms) and CHUNK. delaystore/scripts.go puts this file
-- in place of the line "--!include tombs.lua" of a script; it is not a script of its own.

-- tombAdd leaves tombstones of the source ids srcs for ttl ms (<= 0: none): in the sets
-- when compact, else in the zset t.
local function tombAdd(t, srcs, ttl, compact)
  if ttl <= 0 or #srcs == 0 then return end
  if not compact then
    local exp = string.format('%d', now + ttl)
    local zadd = {}
    for _, src in ipairs(srcs) do
      zadd[#zadd + 1] = exp
      zadd[#zadd + 1] = src
    end
    for i = 1, #zadd, CHUNK do
      redis.call('ZADD', t, unpack(zadd, i, math.min(i + CHUNK - 1, #zadd)))
    end
    return
  end
  local newer = t .. 'n'
  local left = redis.call('PTTL', newer)
  if left ~= -2 and left <= ttl + math.floor(ttl / 2) then -- older than TTL (-1: no expiry)
    redis.call('UNLINK', t .. 'o')
    redis.call('RENAME', newer, t .. 'o')
    if left == -1 then redis.call('PEXPIRE', t .. 'o', ttl) end
    left = -2
  end
  for i = 1, #srcs, CHUNK do
    redis.call('SADD', newer, unpack(srcs, i, math.min(i + CHUNK - 1, #srcs)))
  end
  if left == -2 then redis.call('PEXPIRE', newer, 2 * ttl + math.floor(ttl / 2)) end
end

-- tombPrune removes at most n expired tombstones of the zset t, oldest first.
local function tombPrune(t, n)
  local old = redis.call('ZRANGEBYSCORE', t, '-inf', string.format('%d', now), 'LIMIT', 0, n)
  for i = 1, #old, CHUNK do
    redis.call('ZREM', t, unpack(old, i, math.min(i + CHUNK - 1, #old)))
  end
end

-- tombLive sets found[k] = true for each index k in ks whose source id srcs[k] has a live
-- tombstone: in the sets when compact, else in the zset t (score > now).
local function tombLive(t, srcs, ks, compact, found)
  for i = 1, #ks, CHUNK do
    local last = math.min(i + CHUNK - 1, #ks)
    local names = {}
    for j = i, last do names[#names + 1] = srcs[ks[j]] end
    if compact then
      for _, key in ipairs({t .. 'n', t .. 'o'}) do
        local r = redis.call('SMISMEMBER', key, unpack(names))
        for j = 1, #r do
          if r[j] == 1 then found[ks[i + j - 1]] = true end
        end
      end
    else
      local exps = redis.call('ZMSCORE', t, unpack(names))
      for j = 1, #exps do
        if exps[j] and tonumber(exps[j]) > now then found[ks[i + j - 1]] = true end
      end
    end
  end
end
