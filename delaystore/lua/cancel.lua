#!lua flags=allow-oom
-- cancel: delete one message that is not in delivery, leaving a tombstone of its source
-- message, and remember the cancel so that an earlier message of the id arriving later is not parked.
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:tn (newer tombstones: tombs.lua),
--       4 = {P:s}:r (retry set; the id leaves it), 5 = {P:s}:n (parked count per target),
--       6 = {P:s}:c (hash id -> "<cancel source ms>,<until ms>", remembered cancels),
--       7 = {P:s}:cx (zset id -> until ms, the expiry index of 6), 8 = {P:s}:qt,
--       9 = the quota counter hash (quota.lua), 10 = {P:s}:to (older tombstones),
--       11 = {P:s}:k (chains of ordering keys: chain.lua), 12 = {P:s}:ki (keyed entries)
-- ARGV: 1 = id, 2 = tombstone TTL ms (<= 0: none), 3 = the cancel's source time ms (<= 0:
--       an operator's cancel (the message API): now, and the entry is deleted whatever its
--       source time), 4 = window ms (<= 0: remember nothing), 5 = the shard's wake channel
--       (P:wake:<s>), 6 = shard number, 7 = the message's ordering key ('' none)
-- returns: 1 if it existed and was deleted; 0 if not found (or kept, below); 2 if it is in
-- delivery and was kept; 3 if it is a recurring message in delivery: deleted (no firing
-- after the current one), the current firing may still be published
-- In delivery = claimed by a replica whose lease still runs: an even score (claim.lua's
-- token; retry.lua writes odd ones) other than the entry's due time, after now. That
-- replica may publish it up to its due time (claimed ahead) and acks it after, so a cancel
-- answered 1 must find no such copy: the entry is kept (2) and its holder publishes it.
-- Once the lease ran out its holder no longer publishes (egress gives up at 4/5 of the
-- lease), and the entry is deleted as a pending one is. A recurring message's entry in
-- delivery is deleted all the same (3: the firing's re-park, retry.lua mode n, is then
-- fenced out) and withdrawn on the shard's wake channel ("<shard>:x<version>:<id>"): a
-- replica holding the firing claimed ahead drops it (egress/hold.go; best effort).
-- An entry whose stored source time (_delaybridge_sent, messages parked with replace) is
-- after the cancel's was published after the cancel: it is kept (0).
-- A keyed message is named by its key and id: an entry of the id with another key (or
-- none; one shard can hold both) is not this message: kept (0), the cancel remembered.
-- A deleted keyed entry leaves its chain, releasing the next of its key when it was the
-- head (chain.lua).
-- A deleted entry whose body carries a source id leaves a tombstone of it for TTL
-- (tombs.lua), as ack does: a redelivery of the cancelled source message is not parked again.
-- Found or not, the cancel is remembered until now + window: park drops a message of the
-- id whose source time is at or before the remembered one (the later of this cancel's and
-- one remembered before, while live). At most 2 expired remembered cancels are removed
-- per call, so the sets shrink as fast as cancels add to them.
-- flags: allow-oom (first line, Redis >= 7): a cancel frees memory, so it runs while Redis
-- refuses writes for memory (a cancel that found nothing adds its ~190 B memory then too).
-- Without script flags (Redis 6, miniredis) the first line is commented out
-- (delaystore/scripts.go).

--!include envelope.lua

--!include quota.lua

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local CHUNK = 1000

--!include tombs.lua

--!include chain.lua

local function remember(id, sent, window)
  if window <= 0 then return end
  local until_ = now + window
  local old = redis.call('HGET', KEYS[6], id)
  if old then
    local was, ends = string.match(old, '^(%d+),(%d+)$')
    if was and tonumber(ends) > now and tonumber(was) > sent then sent = tonumber(was) end
  end
  redis.call('HSET', KEYS[6], id, string.format('%d', sent) .. ',' .. string.format('%d', until_))
  redis.call('ZADD', KEYS[7], string.format('%d', until_), id)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, 2)
  if #expired > 0 then
    redis.call('ZREM', KEYS[7], unpack(expired))
    redis.call('HDEL', KEYS[6], unpack(expired))
  end
end

local at = tonumber(ARGV[3]) or 0
local operator = at <= 0
if operator then at = now end
local env = redis.call('HGET', KEYS[2], ARGV[1])
local kv = redis.call('HGET', KEYS[12], ARGV[1])
if env and ((kv and prefixOf(memberOf(kv))) or '') ~= ((ARGV[7] or '') ~= '' and chainPrefix(ARGV[7]) or '') then
  env = nil -- another message: the same id with another key
end
local version, attempts, due, p
if env then version, attempts, due, p = entry(env) end
local sent = p and not operator and sentOf(env, p)
if sent and sent > at then
  -- Published by its source after this cancel (the cancel was read late): kept.
  remember(ARGV[1], at, tonumber(ARGV[4]) or 0)
  return 0
end
local firing = false -- a recurring message in delivery: deleted, its firing withdrawn
if env then
  local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '')
  if score and score % 2 == 0 and score ~= due and score > now then
    if not (p and recurring(env, p)) then
      remember(ARGV[1], at, tonumber(ARGV[4]) or 0)
      return 2
    end
    firing = true
  end
end
if not env then
  remember(ARGV[1], at, tonumber(ARGV[4]) or 0)
  return 0
end
local a = redis.call('ZREM', KEYS[1], ARGV[1])
local b = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if kv then chainLeave(KEYS[1], KEYS[2], KEYS[11], KEYS[12], ARGV[1], kv) end
if p then
  local deltas = {[targetOf(env, p)] = -1}
  count(KEYS[5], deltas)
  quotaSettle(KEYS[8], KEYS[9], KEYS[5], deltas)
end
if env and tonumber(ARGV[2]) > 0 then
  local src = p and sourceOf(env, p, ARGV[1]) or ''
  if src ~= '' then tombAdd(KEYS[3], KEYS[10], {src}, tonumber(ARGV[2])) end
end
remember(ARGV[1], at, tonumber(ARGV[4]) or 0)
if firing then
  redis.call('PUBLISH', ARGV[5], ARGV[6] .. ':x' .. string.format('%d', version) .. ':' .. ARGV[1])
  return 3
end
if a + b > 0 then return 1 end
return 0
