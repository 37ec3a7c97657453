#!lua flags=allow-oom
-- claim: lease the due messages of shards; one group per shard (groups.lua).
-- Per group: KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:nm (the shard's interned names),
-- 4 = {P:s}:ki (keyed entries: chain.lua);
-- ARGV: 1 = lease ms, 2 = max messages, 3 = ahead ms, 4 = the generation of the caller's
-- table of the shard's names
-- returns: per group {now ms, token, next head score or -1, names, now's microseconds
-- within its ms, id1, env1, at1, id2, env2, at2, ... [, releases]}; names is 0 when the shard's names are at generation ARGV[4] (the
-- caller's table decodes the entries), else the names hash whole (HGETALL: the table the
-- entries were written against; docs/design.md "Interned names")
-- (at: 0 for an entry due by now; for one claimed ahead its score, the time it becomes
-- eligible: its due time, or a retry's or put-back's next attempt)
-- (releases, only when not empty: {i1, r1, i2, r2, ...}, the claimed entries held by
-- their ordering key and released after their due time: i the entry's place in the reply
-- (0: id1), r its release time, ms; one EXISTS of ki per group, and for a shard with keyed
-- entries one HMGET of the claimed ids)
-- Members with score <= now + ahead (Redis TIME; ahead: the caller holds those not yet due
-- until their due time, egress/hold.go) are re-scored to token = now + lease, made even
-- (+1 ms when odd), and returned with their stored envelope; a member without envelope is
-- removed. An even score other than the entry's due time marks it claimed (in delivery:
-- cancel.lua, park.lua, bulk.lua); retry.lua's scores are odd. The next head is the
-- least score left: of the first entry after the due ones and of the token (read again
-- only when more than PEEK were due); -1 when none is left or only held entries of
-- ordering keys (scored HELD, above every time: chain.lua), which no claim reaches.
-- Per group: one ZRANGE of the first PEEK entries (+ a ZRANGEBYSCORE and a second ZRANGE
-- when more were due), HMGET, ZADD XX: the commands, not the messages, cost Redis most.
-- flags: allow-oom (first line, Redis >= 7): runs while Redis refuses writes for memory
-- (maxmemory reached, noeviction). It only re-scores existing members (ZADD XX) and removes
-- orphans, so it needs no new memory, and delivering is what frees memory: refused, it would
-- deadlock a full Redis. Servers without script flags (Redis 6, miniredis) run this source
-- with the first line commented out (delaystore/scripts.go); there a full Redis refuses it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowUs = tonumber(t[2]) % 1000
local CHUNK = 1000 -- values per variadic call; even, so pairs stay together

--!include groups.lua

local HELD = 1125899906842625 -- 2^50 + 1: a held entry of an ordering key (chain.lua)

local PEEK = 16 -- entries read by rank first: at a steady load a claim finds a few due (with
-- claim ahead, the ~10 of a 32 ms span at 5k msgs/s over 16 shards)

-- due returns the ids of z due by upTo (score <= upTo), at most max, in score order, when
-- each becomes eligible (aligned: 0 when due by now, else its score), and, when it is
-- known without another read, the score of the first entry left after them (false: none
-- is left; nil: not known). One ZRANGE of the first PEEK entries answers both when fewer
-- than PEEK are due (the common case); else a ZRANGEBYSCORE reads the due ones (without
-- scores: a burst formats and parses none) and, when fewer than max were and upTo is
-- later than now, another one with scores those due after now.
local function due(z, max, upTo)
  local first = redis.call('ZRANGE', z, 0, PEEK - 1, 'WITHSCORES')
  local ids, at = {}, {}
  for i = 1, #first, 2 do
    local score = tonumber(first[i + 1])
    if score > upTo or #ids == max then return ids, at, score end
    ids[#ids + 1] = first[i]
    if score > now then at[#ids] = score else at[#ids] = 0 end
  end
  if #first < 2 * PEEK then return ids, at, false end
  ids = redis.call('ZRANGEBYSCORE', z, '-inf', string.format('%d', now), 'LIMIT', 0, max)
  at = {}
  for i = 1, #ids do at[i] = 0 end
  if #ids < max and upTo > now then
    local later = redis.call('ZRANGEBYSCORE', z, string.format('(%d', now), string.format('%d', upTo), 'WITHSCORES', 'LIMIT', 0, max - #ids)
    for i = 1, #later, 2 do
      ids[#ids + 1] = later[i]
      at[#ids] = tonumber(later[i + 1])
    end
  end
  return ids, at, nil
end

-- releases returns the releases of the claimed entries of out from place first on
-- ({i, release ms, ...}, see above), or nil when there are none: the release time ki keeps
-- before the comma ("<release ms>,<member>", 0 when not released late: chain.lua).
local function releases(ki, out, first)
  if first > #out or redis.call('EXISTS', ki) == 0 then return nil end
  local ids = {}
  for i = first, #out, 3 do ids[#ids + 1] = out[i] end
  local rel = {}
  for i = 1, #ids, CHUNK do
    local vals = redis.call('HMGET', ki, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #vals do
      local v = vals[j]
      local r = v and tonumber(string.sub(v, 1, string.find(v, ',', 1, true) - 1)) or 0
      if r > 0 then
        rel[#rel + 1] = i + j - 2
        rel[#rel + 1] = r
      end
    end
  end
  if #rel == 0 then return nil end
  return rel
end

local function shard(KEYS, ARGV)
  local z, m = KEYS[1], KEYS[2]
  local token = now + tonumber(ARGV[1])
  if token % 2 == 1 then token = token + 1 end -- even: the claim mark
  local tokenStr = string.format('%d', token)
  local out = {now, token, -1, 0, nowUs}
  if (redis.call('HGET', KEYS[3], '@') or '') ~= ARGV[4] then out[4] = redis.call('HGETALL', KEYS[3]) end
  local ids, at, rest = due(z, tonumber(ARGV[2]), now + (tonumber(ARGV[3]) or 0))
  local leased = false
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
        out[#out + 1] = at[i + j - 1]
      else
        orphans[#orphans + 1] = id
      end
    end
    if #zadd > 0 then
      redis.call('ZADD', z, 'XX', unpack(zadd))
      leased = true
    end
    if #orphans > 0 then redis.call('ZREM', z, unpack(orphans)) end
  end
  if rest == nil then
    local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
    if head[2] then out[3] = tonumber(head[2]) end
  elseif rest and leased then
    out[3] = math.min(rest, token)
  elseif rest then
    out[3] = rest
  elseif leased then
    out[3] = token
  end
  if out[3] >= HELD then out[3] = -1 end -- only held entries left: none is eligible
  local rel = releases(KEYS[4], out, 6) -- after the five values of the head
  if rel then out[#out + 1] = rel end
  return out
end

return groups(shard)
