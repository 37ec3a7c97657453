-- chain: ordering keys (docs/design.md "Ordering keys"), shared by park, ack and cancel.
-- The chain of a shard is the ZSET kz ({P:s}:k), every member at score 0:
-- <uvarint key length><key><chain seq, 8 bytes big-endian><id>, so that lexicographic order
-- is key, then parking order. ki ({P:s}:ki) maps the id of every keyed entry of the shard
-- to "<release ms>,<member>" (release: when the entry was released later than its due
-- time, else 0). A held entry is scored HELD in z: odd, above every time.
-- Uses the script's now (Redis TIME, ms) and envelope.lua's uvarint and entry.
-- delaystore/scripts.go puts this file in place of the line "--!include chain.lua" of a
-- script; it is not a script of its own.

local HELD = 1125899906842625 -- 2^50 + 1 (delaystore.heldScore)
local HELD_STR = '1125899906842625'

-- chainPrefix returns the members' prefix of key.
local function chainPrefix(key)
  local n, s = #key, ''
  while n >= 128 do
    s = s .. string.char(n % 128 + 128)
    n = math.floor(n / 128)
  end
  return s .. string.char(n) .. key
end

-- seqBytes returns seq (an integer below 2^53) in 8 bytes, big-endian: its first byte is
-- always 0, so '(' .. prefix .. '\1' bounds a key's members from above.
local function seqBytes(seq)
  local b = {}
  for i = 8, 1, -1 do
    b[i] = seq % 256
    seq = math.floor(seq / 256)
  end
  return string.char(unpack(b))
end

-- memberOf returns the chain member of ki's value v.
local function memberOf(v)
  return string.sub(v, string.find(v, ',', 1, true) + 1)
end

-- prefixOf returns the key prefix of a chain member.
local function prefixOf(member)
  local n, i = uvarint(member, 1)
  return string.sub(member, 1, i + n - 1)
end

-- chainJoin appends id to the chain of key at seq (a version new in the shard, so after
-- every member of the key) and returns whether it is the key's head, and its ki value.
-- The writes wait in j (from chainJoins) until chainFlush: a batch looks each key up once.
local function chainJoin(kz, j, key, seq, id)
  local p = chainPrefix(key)
  local head = false
  if not j.seen[p] then
    j.seen[p] = true
    head = redis.call('ZRANGEBYLEX', kz, '[' .. p, '(' .. p .. '\1', 'LIMIT', 0, 1)[1] == nil
  end
  local member = p .. seqBytes(seq) .. id
  j.zadd[#j.zadd + 1] = '0'
  j.zadd[#j.zadd + 1] = member
  j.hset[#j.hset + 1] = id
  j.hset[#j.hset + 1] = '0,' .. member
  return head, '0,' .. member
end

-- chainJoins returns an empty batch of joins.
local function chainJoins()
  return {seen = {}, zadd = {}, hset = {}}
end

-- chainFlush writes the joins of j and empties it (seen stays: the keys now hold them).
local function chainFlush(kz, ki, j)
  for i = 1, #j.zadd, CHUNK do
    redis.call('ZADD', kz, unpack(j.zadd, i, math.min(i + CHUNK - 1, #j.zadd)))
  end
  for i = 1, #j.hset, CHUNK do
    redis.call('HSET', ki, unpack(j.hset, i, math.min(i + CHUNK - 1, #j.hset)))
  end
  j.zadd, j.hset = {}, {}
end

-- chainIsHead reports whether the member of ki's value v is the first of its key.
local function chainIsHead(kz, v)
  local member = memberOf(v)
  local before = redis.call('ZRANGEBYLEX', kz, '[' .. prefixOf(member), '(' .. member, 'LIMIT', 0, 1)
  return before[1] == nil
end

-- chainLease returns ack's lease of released members (chainLeave): token, the claim mark
-- (even, as claim.lua's), and gen, the generation of the caller's table of the shard's
-- names (claim.lua ARGV[4]), checked against nm before the first lease: a caller that
-- could not decode the body gets no lease (the member is claimed as any other).
local function chainLease(nm, leaseMS, gen)
  local token = now + leaseMS
  if token % 2 == 1 then token = token + 1 end
  return {token = string.format('%d', token), nm = nm, gen = gen, out = {}}
end

-- chainLeasing reports whether lease may lease (the caller's names are current).
local function chainLeasing(lease)
  if lease.ok == nil then lease.ok = (redis.call('HGET', lease.nm, '@') or '') == lease.gen end
  return lease.ok
end

-- chainLeased adds a leased member (id, its body, due time) to lease.out. Its release time
-- goes to the caller only, not to ki: should it come back (a retry, a lost lease), its
-- lateness counts from its due time, as after any retry.
local function chainLeased(lease, id, env, due)
  local out, n = lease.out, #lease.out
  out[n + 1], out[n + 2], out[n + 3] = id, env, now > due and now or 0
end

-- chainLeave takes id (ki's value v) out of its chain. When it was its key's head (head:
-- true when the caller knows it, as ack does: only a head is ever claimed; nil: looked
-- up), the next member is released: re-scored from HELD to its due time (its header's;
-- ZADD XX LT: only a held score is above it), and its release time kept in ki when that
-- is later than the due time. A next member whose entry is gone is dropped on the way (at
-- most 100 a call): a chain never waits for a member that nothing will settle.
-- lease (ack's, from chainLease; nil: none) leases a released member that is due by now
-- instead: scored lease.token (the claim mark) and its id, body and release time (0 when
-- not late) added to lease.out, so that the caller delivers it without a claim.
local function chainLeave(z, m, kz, ki, id, v, head, lease)
  local member = memberOf(v)
  local p = prefixOf(member)
  if head == nil then head = chainIsHead(kz, v) end
  redis.call('ZREM', kz, member)
  redis.call('HDEL', ki, id)
  if not head then return end
  for _ = 1, 100 do
    local nxt = redis.call('ZRANGEBYLEX', kz, '(' .. member, '(' .. p .. '\1', 'LIMIT', 0, 1)[1]
    if nxt == nil then return end
    local nid = string.sub(nxt, #p + 9)
    local env = redis.call('HGET', m, nid)
    if env then
      local _, _, due = entry(env)
      due = due or now
      local score = string.format('%d', due)
      local leased = lease and due <= now and chainLeasing(lease)
      if leased then score = lease.token end
      if redis.call('ZADD', z, 'XX', 'LT', 'CH', score, nid) == 1 then
        if leased then
          chainLeased(lease, nid, env, due)
        elseif now > due then
          redis.call('HSET', ki, nid, string.format('%d', now) .. ',' .. nxt)
        end
      end
      return
    end
    redis.call('ZREM', kz, nxt)
    redis.call('HDEL', ki, nid)
    member = nxt
  end
end

-- chainSettle is chainLeave for heads (ack's: acked, so claimed, so each its key's head)
-- in batched calls: ids with ki's values vals (false: no key; nil: none keyed). It costs
-- one ZRANGEBYLEX per keyed id and per call one each of ZREM, HDEL, HMGET, ZMSCORE and
-- ZADD (and HSET for late releases not leased). Only a next member still HELD is
-- released, each once; one whose entry is gone takes chainLeave's way.
local function chainSettle(z, m, kz, ki, ids, vals, lease)
  local members, keyed, nids, nxts = {}, {}, {}, {}
  for i, id in ipairs(ids) do
    if vals[i] then
      local member = memberOf(vals[i])
      local p = prefixOf(member)
      members[#members + 1], keyed[#keyed + 1] = member, id
      local nxt = redis.call('ZRANGEBYLEX', kz, '(' .. member, '(' .. p .. '\1', 'LIMIT', 0, 1)[1]
      if nxt then nids[#nids + 1], nxts[#nxts + 1] = string.sub(nxt, #p + 9), nxt end
    end
  end
  for i = 1, #members, CHUNK do
    redis.call('ZREM', kz, unpack(members, i, math.min(i + CHUNK - 1, #members)))
    redis.call('HDEL', ki, unpack(keyed, i, math.min(i + CHUNK - 1, #keyed)))
  end
  local zadd, hset, seen = {}, {}, {}
  for c = 1, #nids, CHUNK do
    local last = math.min(c + CHUNK - 1, #nids)
    local envs = redis.call('HMGET', m, unpack(nids, c, last))
    local scores = redis.call('ZMSCORE', z, unpack(nids, c, last))
    for j = 1, #envs do
      local nid, env = nids[c + j - 1], envs[j]
      if not env then
        chainLeave(z, m, kz, ki, nid, '0,' .. nxts[c + j - 1], true, lease)
      elseif not seen[nid] and scores[j] and tonumber(scores[j]) >= HELD then
        seen[nid] = true
        local _, _, due = entry(env)
        due = due or now
        local score = string.format('%d', due)
        if lease and due <= now and chainLeasing(lease) then
          score = lease.token
          chainLeased(lease, nid, env, due)
        elseif now > due then
          hset[#hset + 1], hset[#hset + 2] = nid, string.format('%d', now) .. ',' .. nxts[c + j - 1]
        end
        zadd[#zadd + 1], zadd[#zadd + 2] = score, nid
      end
    end
  end
  for i = 1, #zadd, CHUNK do redis.call('ZADD', z, 'XX', unpack(zadd, i, math.min(i + CHUNK - 1, #zadd))) end
  for i = 1, #hset, CHUNK do redis.call('HSET', ki, unpack(hset, i, math.min(i + CHUNK - 1, #hset))) end
end

-- chainValues returns ki's values of ids (false for an unkeyed one), or nil when the shard
-- has no keyed entry (one EXISTS).
local function chainValues(ki, ids)
  if #ids == 0 or redis.call('EXISTS', ki) == 0 then return nil end
  local out = {}
  for i = 1, #ids, CHUNK do
    local part = redis.call('HMGET', ki, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
