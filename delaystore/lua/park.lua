-- park: hold messages until they are due; one group per shard (groups.lua).
-- Per group: KEYS: 1 = {P:s}:z (zset id -> next eligible ms), 2 = {P:s}:m (hash id -> stored envelope),
--       3 = {P:s}:seq (version counter), 4 = {P:s}:tn (newer tombstones: tombs.lua),
--       5 = {P:s}:r (retry set; a replaced id leaves it), 6 = {P:s}:n (parked count per
--       target: +1 per message written, -1 for the target of an entry it replaces),
--       7 = {P:s}:c (hash id -> "<cancel source ms>,<until ms>", remembered cancels),
--       8 = {P:s}:cx (zset id -> until ms: only its size is read here),
--       9 = {P:s}:qt, 10 = the quota counter hash (quota.lua: {P:quota}, or {P:s}:q on Cluster),
--       11 = {P:s}:nm (the shard's interned names: delaystore/names.go),
--       12 = {P:s}:to (older tombstones), 13 = {P:s}:k (chains of ordering keys: chain.lua),
--       14 = {P:s}:ki (keyed entries)
-- ARGV: 1 = the shard's wake channel (P:wake:<s>), 2 = shard number, then per message 5 values:
--       id, mode and source time ('r' relative | 'a' absolute, followed by the message's
--       time by its source in ms when known: 'r1700000000123'; unknown: never covered by a
--       remembered cancel), replace ('0' | '1'), delay-or-at ms, body; then the quota block
--       (quota.lua quotaGate: triples target, pattern, limit, then their count; '0': none),
--       then the names block: pairs code, name of the codes the bodies hold, then their
--       count ('0': none), then the keys block: pairs message number in the group (1-based),
--       ordering key, of the messages that have one, then their count ('0': none)
-- returns: per group, per message in ARGV order, {due ms, existed (0 | 1 | 2 | 3 | 4 | 5 | 6)}
-- A group whose names block names a code the shard does not hold as given (a failover
-- lost it, or the key was deleted) writes nothing: {0, 5} for every message (Go interns
-- again and parks them once more), so no body is ever written with a code its shard lacks.
-- A message that would take its target's quota pattern past the limit is not parked:
-- {0, 4} (BRIDGE_TARGET_QUOTA; an entry it would replace stays as it was).
-- A body whose source id has a live tombstone (delivered or cancelled; tombs.lua) is not
-- parked: {0, 2}. A message whose id has a live remembered cancel (until > now) with a
-- source time at or after the message's is not parked either: {0, 3} (the cancel was read
-- first, the message it cancels arrived later). An existing id with replace = 0, or with
-- replace = 1 and the same non-empty source id stored (a redelivery of the parked message), or
-- with replace = 1 and a source time before the stored one's (both known: a replace its
-- source published before the parked version, read late from another partition), is kept as is
-- (idempotent redelivery); otherwise the entry gets a new version (from seq), attempts 0
-- and due = now + delay or at. A wake "<shard>:<due>" is published when the batch's
-- earliest new due is earlier than the head. A message that replaced an entry in delivery
-- (claimed by a replica whose lease runs: an even score other than its due time, after now,
-- as cancel.lua reads it; one ZMSCORE of the replaced ids) answers {due, 6}: the replaced
-- version is still published by its holder (its ack is then fenced by the version), the
-- new one is parked as its own firing. A debounced message (a body with a bound field:
-- envelope.lua boundOf) is due no later than its bound: the time the first version of the
-- pending message was parked plus the max wait, fixed in the body it writes (withBound); a
-- replacement keeps the pending bound (counting its own max wait, when it has one, from
-- that first parking), one of an entry in delivery starts a new one (docs/design.md
-- "Bounded debounce"). Reads and writes are batched (HMGET, INCRBY,
-- variadic HSET / ZADD) in chunks that stay below Lua's unpack limit.
-- A message written with an ordering key joins its key's chain at its version (chain.lua):
-- scored at its due time when it is the key's first, else HELD. A replace with the same key
-- keeps its place, and its score while held or in delivery (ack.lua re-scores it once the
-- replaced version is confirmed); one with another key or none leaves the old chain
-- (releasing the next when it was the head) and joins the new one.
-- flags: none, on purpose. While Redis refuses writes for memory (maxmemory, noeviction) the
-- first INCRBY is refused with -OOM and nothing is written: the source is not acknowledged
-- (back-pressure) until deliveries free memory. Never give it allow-oom.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local CHUNK = 1000 -- values per variadic call; even, so pairs stay together
local W = 5 -- ARGV values per message

--!include envelope.lua

--!include tombs.lua

--!include groups.lua

--!include quota.lua

--!include chain.lua

local function chunked(cmd, key, list)
  for i = 1, #list, CHUNK do
    redis.call(cmd, key, unpack(list, i, math.min(i + CHUNK - 1, #list)))
  end
end

-- remembered returns, per index into ids, true when a live remembered cancel of the id
-- covers the message (its source time <= the cancel's). One ZCARD when the shard has no
-- remembered cancel (the common case); else one HMGET per chunk of ids.
local function remembered(KEYS, ARGV, ids)
  local out = {}
  if redis.call('ZCARD', KEYS[8]) == 0 then return out end
  for i = 1, #ids, CHUNK do
    local part = redis.call('HMGET', KEYS[7], unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #part do
      local v = part[j]
      if v then
        local k = i + j - 1
        local at, ends = string.match(v, '^(%d+),(%d+)$')
        local sent = tonumber(string.sub(ARGV[3 + (k - 1) * W + 1], 2)) or 0
        if sent > 0 and ends and tonumber(ends) > now and sent <= tonumber(at) then out[k] = true end
      end
    end
  end
  return out
end

-- inDelivery returns the indexes into ids of the messages whose replaced entry ({id, due,
-- index}: swapped) is in delivery: claimed by a replica whose lease runs (an even score,
-- claim.lua's mark, other than its due time, after now). One ZMSCORE per chunk, before the
-- batch's ZADD.
local function inDelivery(z, swapped)
  local out = {}
  for i = 1, #swapped, CHUNK do
    local last = math.min(i + CHUNK - 1, #swapped)
    local ids = {}
    for k = i, last do ids[#ids + 1] = swapped[k][1] end
    local scores = redis.call('ZMSCORE', z, unpack(ids))
    for k = i, last do
      local r, sc = swapped[k], tonumber(scores[k - i + 1] or '')
      if sc and sc % 2 == 0 and sc ~= r[2] and sc > now then out[#out + 1] = r[3] end
    end
  end
  return out
end

-- claimedBounds returns, per id, true when the entry stored before the batch (olds, index
-- into ids) is replaced (replace 1), holds a bound (a debounced message: envelope.lua
-- boundOf) and is in delivery (as inDelivery reads it): a replacement is then its own
-- firing and starts a new bound. One ZMSCORE per chunk, none when no replace meets a
-- stored bound (the common case).
local function claimedBounds(z, ids, olds, ARGV)
  local out, ask, dues = {}, {}, {}
  for k = 1, #ids do
    local o, id = olds[k], ids[k]
    if o and dues[id] == nil and ARGV[3 + (k - 1) * W + 2] == '1' then
      local _, _, due, p = entry(o)
      if p and boundOf(o, p) then -- two byte reads for an entry without a bound
        ask[#ask + 1] = id
        dues[id] = due
      end
    end
  end
  for i = 1, #ask, CHUNK do
    local last = math.min(i + CHUNK - 1, #ask)
    local scores = redis.call('ZMSCORE', z, unpack(ask, i, last))
    for k = i, last do
      local sc = tonumber(scores[k - i + 1] or '')
      if sc and sc % 2 == 0 and sc ~= dues[ask[k]] and sc > now then out[ask[k]] = true end
    end
  end
  return out
end

-- debounce returns the max wait and the bound (ms) of a version with body (as Go encoded
-- it) that replaces a pending one bounded by pby with max wait pmw (both nil: no pending
-- one, or it has no bound): its own max wait counted from when the pending message's first
-- version was parked (pby - pmw; now when it had none), else the pending one's bound,
-- except for a recurring body; nil when no bound applies.
local function debounce(body, pmw, pby)
  local mw = boundOf(body, 1)
  if mw then
    local first = now
    if pby then first = pby - pmw end
    return mw, first + mw
  end
  if pby and not recurring(body, 1) then return pmw, pby end
  return nil
end

-- namesHeld takes the names block off ARGV and reports whether the shard's names hash
-- (key) holds every code of it with its name: one HMGET, none for an empty block.
local function namesHeld(key, ARGV)
  local n = tonumber(ARGV[#ARGV])
  ARGV[#ARGV] = nil
  if not n or n == 0 then return true end
  local base = #ARGV - 2 * n
  local codes = {}
  for i = 1, n do codes[i] = ARGV[base + 2 * i - 1] end
  local got = redis.call('HMGET', key, unpack(codes))
  local held = true
  for i = 1, n do
    if got[i] ~= ARGV[base + 2 * i] then held = false end
  end
  for i = #ARGV, base + 1, -1 do ARGV[i] = nil end
  return held
end

-- keysBlock takes the keys block off ARGV and returns message number -> ordering key.
local function keysBlock(ARGV)
  local n = tonumber(ARGV[#ARGV])
  ARGV[#ARGV] = nil
  local keys = {}
  if not n or n == 0 then return keys end
  local base = #ARGV - 2 * n
  for i = 1, n do keys[tonumber(ARGV[base + 2 * i - 1])] = ARGV[base + 2 * i] end
  for i = #ARGV, base + 1, -1 do ARGV[i] = nil end
  return keys
end

-- chained returns the score of message k (id, written at version with due time dueStr,
-- replacing an entry due at existing, if any) as its ordering key (keys[k]) and the chain
-- it was in (kcur[id], ki's value) make it, and keeps kcur and pend (id -> score decided
-- in this batch) up to date.
local function chained(KEYS, st, k, id, version, dueStr, existing)
  local key, kv = st.keys[k], st.kcur[id]
  local z, kz, ki = KEYS[1], KEYS[13], KEYS[14]
  local score = dueStr
  if kv and key and prefixOf(memberOf(kv)) == chainPrefix(key) then
    local cur = tonumber(st.pend[id] or redis.call('ZSCORE', z, id) or '')
    if cur and (cur >= HELD or (cur % 2 == 0 and cur ~= existing and cur > now)) then
      score = string.format('%d', cur) -- held, or in delivery: ack.lua re-scores it
    end
  else
    if kv then
      chainFlush(kz, ki, st.joins) -- kv may be one of them
      chainLeave(z, KEYS[2], kz, ki, id, kv)
      st.kcur[id] = nil
    end
    if key then
      local head, v = chainJoin(kz, st.joins, key, version, id)
      if not head then score = HELD_STR end
      st.kcur[id] = v
    end
  end
  st.pend[id] = score
  return score
end

local function shard(KEYS, ARGV)
  local z, m = KEYS[1], KEYS[2]
  local keys = keysBlock(ARGV) -- takes the keys block off ARGV
  local held = namesHeld(KEYS[11], ARGV) -- takes the names block off ARGV
  local gate = quotaGate(KEYS[9], KEYS[10], ARGV) -- takes the quota block off ARGV
  local ids = {}
  for i = 3, #ARGV, W do ids[#ids + 1] = ARGV[i] end
  if #ids == 0 then return {} end
  if not held then
    local out = {}
    for k = 1, #ids do out[k] = {0, 5} end
    return out
  end
  local olds = {}
  for i = 1, #ids, CHUNK do
    local part = redis.call('HMGET', m, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #part do olds[i + j - 1] = part[j] end
  end

  -- cur[id] = due of the entry as it stands while the batch is applied (nil: absent), and
  -- curSrc[id] its source id, curTgt[id] its target; deltas[target] what the batch adds
  -- to the target's parked count.
  local cur, curSrc, curTgt, deltas = {}, {}, {}, {}
  local curSent = {} -- curSent[id]: the source time stored with the entry (replace only)
  -- curMW[id], curBy[id]: the max wait and bound of the entry (replace only; nil: none)
  local curMW, curBy = {}, {}
  local claimed = claimedBounds(z, ids, olds, ARGV)
  local bodies = {} -- bodies[k]: a written body with its bound fixed (else ARGV's)
  -- oldVer[id]: the version of an entry stored before the batch; swapped: {id, due, index
  -- of the replacing message} of those this batch replaces
  local oldVer, swapped = {}, {}
  local out = {}
  local writes = {} -- indexes into ids of the messages to write, in order
  local prior = {} -- prior[k]: the due time of the entry message k replaces (nil: none)
  local dues = {}
  local srcs, withSrc = {}, {}
  for k = 1, #ids do
    srcs[k] = sourceOf(ARGV[3 + (k - 1) * W + 4], 1, ids[k])
    if srcs[k] ~= '' then withSrc[#withSrc + 1] = k end
  end
  local tombed = {}
  tombLive(KEYS[4], KEYS[12], srcs, withSrc, tombed)
  local cancelled = remembered(KEYS, ARGV, ids)
  for k = 1, #ids do
    local id = ids[k]
    local a = 3 + (k - 1) * W
    local src = srcs[k]
    local tomb = tombed[k]
    local existing = cur[id]
    if existing == nil and olds[k] then
      local ver, _, due, p = entry(olds[k])
      existing = due or 0
      oldVer[id] = ver
      curSrc[id] = p and sourceOf(olds[k], p, id) or ''
      curTgt[id] = p and targetOf(olds[k], p) or ''
      if p and ARGV[a + 2] == '1' then
        curSent[id] = sentOf(olds[k], p)
        if not claimed[id] then curMW[id], curBy[id] = boundOf(olds[k], p) end
      end
    end
    local sent = tonumber(string.sub(ARGV[a + 1], 2)) or 0
    if tomb then
      out[k] = {0, 2}
    elseif cancelled[k] then
      out[k] = {0, 3}
    elseif existing ~= nil and (ARGV[a + 2] == '0' or (src ~= '' and curSrc[id] == src) or
        (sent > 0 and curSent[id] and curSent[id] > sent)) then
      -- kept: not a replace, a redelivery of the stored message, or a replace its source
      -- published before the stored one (read late, from another partition): the later
      -- publish wins, as a cancel's source time does (docs/design.md "Remembered cancels")
      cur[id] = existing
      out[k] = {existing, 1}
    elseif not gate.admit(existing ~= nil and curTgt[id] or nil, ARGV[a + 4]) then
      out[k] = {0, 4}
    else
      local due
      if string.byte(ARGV[a + 1]) == 97 then -- 'a'
        due = tonumber(ARGV[a + 3])
      else
        due = now + tonumber(ARGV[a + 3])
      end
      local mw, by = debounce(ARGV[a + 4], curMW[id], curBy[id])
      if by then
        if due > by then due = by end
        bodies[k] = withBound(ARGV[a + 4], mw, by)
      end
      curMW[id], curBy[id] = mw, by
      if existing ~= nil then deltas[curTgt[id]] = (deltas[curTgt[id]] or 0) - 1 end
      if oldVer[id] then
        swapped[#swapped + 1] = {id, existing, k}
        oldVer[id] = nil
      end
      local tgt = targetOf(ARGV[a + 4], 1)
      deltas[tgt] = (deltas[tgt] or 0) + 1
      cur[id] = due
      curSrc[id] = src
      curTgt[id] = tgt
      if sent > 0 and ARGV[a + 2] == '1' then curSent[id] = sent else curSent[id] = nil end
      writes[#writes + 1] = k
      dues[k] = due
      prior[k] = existing
      if existing ~= nil then out[k] = {due, 1} else out[k] = {due, 0} end
    end
  end

  if #writes > 0 then
    local version = redis.call('INCRBY', KEYS[3], #writes) - #writes
    local hset, zadd, replaced = {}, {}, {}
    local earliest = nil
    local st = nil -- ordering keys: {keys, kcur = id -> ki value, pend = id -> score}
    if next(keys) ~= nil or redis.call('EXISTS', KEYS[14]) == 1 then
      st = {keys = keys, kcur = {}, pend = {}, joins = chainJoins()}
      local vals = chainValues(KEYS[14], ids) or {}
      for k = 1, #ids do
        if vals[k] then st.kcur[ids[k]] = vals[k] end
      end
    end
    for _, k in ipairs(writes) do
      version = version + 1
      local id = ids[k]
      local dueStr = string.format('%d', dues[k])
      local score = dueStr
      if st then score = chained(KEYS, st, k, id, version, dueStr, prior[k]) end
      hset[#hset + 1] = id
      local body = bodies[k] or ARGV[3 + (k - 1) * W + 4]
      hset[#hset + 1] = header(version, 0, dues[k]) .. body
      zadd[#zadd + 1] = score
      zadd[#zadd + 1] = id
      if score == dueStr and (earliest == nil or dues[k] < earliest) then earliest = dues[k] end
      if out[k][2] == 1 then replaced[#replaced + 1] = id end
    end
    if st then chainFlush(KEYS[13], KEYS[14], st.joins) end
    local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
    for _, k in ipairs(inDelivery(z, swapped)) do out[k][2] = 6 end
    chunked('HSET', m, hset)
    chunked('ZADD', z, zadd)
    chunked('ZREM', KEYS[5], replaced)
    count(KEYS[6], deltas)
    gate.flush(KEYS[6], deltas)
    if earliest and (head[2] == nil or earliest < tonumber(head[2])) then
      redis.call('PUBLISH', ARGV[1], ARGV[2] .. ':' .. string.format('%d', earliest))
    end
  end
  return out
end

return groups(shard)
