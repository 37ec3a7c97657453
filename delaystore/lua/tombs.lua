-- tombs: tombstones of delivered or cancelled source messages, shared by park, ack,
-- cancel and bulk. t is the shard's tombstone key {P:s}:t. A tombstone is a member (the
-- source id) of a bucket set t .. 'b:' .. <e>, a SET of the tombstones written in one
-- time bucket (width ceil(TTL / 2)) that expires (PEXPIREAT) at e = bucket start + width +
-- TTL: so each lives at least TTL and at most 1.5 x TTL, and Redis deletes it with its
-- bucket, no sweeper. The index t .. 'b' (ZSET member e, score e) lists the buckets: park
-- reads the live ones (score > now). Key names come from the Redis clock, never from
-- input. t itself is the ZSET (source id -> until ms) that earlier versions wrote: read
-- while it holds any (ack prunes it), never written.
-- Uses the script's now (Redis TIME, ms). delaystore/scripts.go puts this file in place
-- of the line "--!include tombs.lua" of a script; it is not a script of its own.
local TOMB_CHUNK = 1000

-- tombAdd leaves tombstones of the source ids srcs for ttl ms (<= 0: none).
local function tombAdd(t, srcs, ttl)
  if ttl <= 0 or #srcs == 0 then return end
  local width = math.ceil(ttl / 2)
  local e = string.format('%d', now - now % width + width + ttl)
  local key = t .. 'b:' .. e
  for i = 1, #srcs, TOMB_CHUNK do
    redis.call('SADD', key, unpack(srcs, i, math.min(i + TOMB_CHUNK - 1, #srcs)))
  end
  redis.call('PEXPIREAT', key, e)
  if redis.call('ZADD', t .. 'b', 'NX', e, e) == 1 then -- a new bucket: drop the expired ones
    redis.call('ZREMRANGEBYSCORE', t .. 'b', '-inf', string.format('%d', now))
  end
end

-- tombLive returns, per index into names (source ids), true when a live tombstone of it
-- exists: one SMISMEMBER per live bucket and chunk, and ZMSCORE on t while it holds
-- tombstones of an earlier version.
local function tombLive(t, names)
  local found = {}
  if #names == 0 then return found end
  local buckets = redis.call('ZRANGEBYSCORE', t .. 'b', '(' .. string.format('%d', now), '+inf')
  for _, e in ipairs(buckets) do
    for i = 1, #names, TOMB_CHUNK do
      local r = redis.call('SMISMEMBER', t .. 'b:' .. e, unpack(names, i, math.min(i + TOMB_CHUNK - 1, #names)))
      for j = 1, #r do
        if r[j] == 1 then found[i + j - 1] = true end
      end
    end
  end
  if redis.call('ZCARD', t) > 0 then
    for i = 1, #names, TOMB_CHUNK do
      local exps = redis.call('ZMSCORE', t, unpack(names, i, math.min(i + TOMB_CHUNK - 1, #names)))
      for j = 1, #exps do
        if exps[j] and tonumber(exps[j]) > now then found[i + j - 1] = true end
      end
    end
  end
  return found
end
