-- quota: the counts behind BRIDGE_TARGET_QUOTA (docs/design.md, "Quotas"), shared by park,
-- ack, cancel and bulk. delaystore/scripts.go puts this file in place of the line
-- "--!include quota.lua" of a script; it is not a script of its own. It uses count's
-- convention (envelope.lua): deltas = target -> signed change of its parked count.
-- Keys: qt = {P:s}:qt (hash target -> pattern: the shard's targets that have messages and
-- were mapped to a quota pattern when their first message of the shard was parked), qc =
-- the counter hash: 'p:<pattern>' = parked messages of the targets mapped to the pattern,
-- '#' = the pattern list the mapping was made with (quotacount.lua). Standalone and
-- Sentinel: {P:quota}, one for the store; Redis Cluster: {P:s}:q, the shard's own (its
-- share of each limit), so every key of a call shares the shard's hash slot.

-- quotaSettle adds deltas to the counts of the patterns their targets are mapped to, and
-- forgets the mapping of a target that has no message left in the shard (hash n, already
-- counted by count). Call it after count. Costs one HMGET of the changed targets (on an
-- absent key when the shard maps none) for targets that match no pattern: nothing more.
-- (HMGET, not EXISTS: the bridge's ACL grants no EXISTS, docs/operating.md "Security".)
local function quotaSettle(qt, qc, n, deltas)
  local tgts = {}
  for tgt, d in pairs(deltas) do
    if d ~= 0 and tgt ~= '' then tgts[#tgts + 1] = tgt end
  end
  local sums = {}
  for i = 1, #tgts, 1000 do
    local last = math.min(i + 999, #tgts)
    local pats = redis.call('HMGET', qt, unpack(tgts, i, last))
    for j = 1, #pats do
      local tgt, p = tgts[i + j - 1], pats[j]
      if p then
        sums[p] = (sums[p] or 0) + deltas[tgt]
        if deltas[tgt] < 0 and redis.call('HEXISTS', n, tgt) == 0 then redis.call('HDEL', qt, tgt) end
      end
    end
  end
  for p, d in pairs(sums) do
    if d ~= 0 and redis.call('HINCRBY', qc, 'p:' .. p, d) <= 0 then redis.call('HDEL', qc, 'p:' .. p) end
  end
end

-- quotaGate reads park's quota block off the end of a group's arguments (args: the group's
-- ARGV; its last value is the block's length L, the L values before it are triples target,
-- pattern, limit: the group's targets that match a pattern of the caller's
-- BRIDGE_TARGET_QUOTA, with the limit that applies to qc) and removes it, so the rest of
-- park reads its arguments as before. It returns the gate: admit(oldTarget, body) decides
-- whether a message of body's target may be written (replacing an entry of oldTarget, or
-- nil), keeping the batch's running counts; flush(n, deltas) maps the new targets and
-- settles the counts (after count). A group without a block costs nothing here. The
-- check is exact against qc: on one Redis node qc counts the whole store, so concurrent
-- parks of many replicas (scripts run one at a time) never pass the limit together.
local function quotaGate(qt, qc, args)
  local len = tonumber(args[#args]) or 0
  args[#args] = nil
  local rules = {}
  local base = #args - len
  for i = base + 1, #args, 3 do rules[args[i]] = {args[i + 1], tonumber(args[i + 2])} end
  for i = #args, base + 1, -1 do args[i] = nil end
  local gate = {}
  local any = len > 0
  local mapped, fresh, running = {}, {}, {}
  -- patternOf: the pattern tgt counts against: its mapping, else the caller's rule.
  local function patternOf(tgt)
    if tgt == nil or tgt == '' then return nil end
    local p = mapped[tgt]
    if p == nil then
      p = redis.call('HGET', qt, tgt)
      if not p and rules[tgt] then
        p = rules[tgt][1]
        fresh[tgt] = p
      end
      mapped[tgt] = p
    end
    return p or nil
  end
  local function current(p)
    if running[p] == nil then running[p] = tonumber(redis.call('HGET', qc, 'p:' .. p)) or 0 end
    return running[p]
  end
  function gate.admit(oldTgt, body)
    if not any then return true end
    local tgt = targetOf(body, 1)
    local pNew, pOld = patternOf(tgt), patternOf(oldTgt)
    if pNew and pNew ~= pOld then
      local rule = rules[tgt]
      if rule and rule[1] == pNew and current(pNew) + 1 > rule[2] then return false end
      running[pNew] = current(pNew) + 1
      if pOld then running[pOld] = current(pOld) - 1 end
    end
    return true
  end
  function gate.flush(n, deltas)
    local hset = {}
    for tgt, p in pairs(fresh) do
      -- Mapped only when all of the shard's messages of tgt are this batch's: one parked
      -- earlier without a mapping (a replica without the pattern) would later be
      -- subtracted without having been added.
      local d = deltas[tgt] or 0
      if d > 0 and tonumber(redis.call('HGET', n, tgt)) == d then
        hset[#hset + 1] = tgt
        hset[#hset + 1] = p
      end
    end
    for i = 1, #hset, 1000 do redis.call('HSET', qt, unpack(hset, i, math.min(i + 999, #hset))) end
    quotaSettle(qt, qc, n, deltas)
  end
  return gate
end
