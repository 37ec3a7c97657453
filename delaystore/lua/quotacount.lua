-- quotacount: map the targets of shards to BRIDGE_TARGET_QUOTA's patterns again and count
-- their parked messages per pattern from the shards' parked counts per target (quota.lua),
-- when the pattern list changed (or when asked to).
-- KEYS: per shard of the call 2 keys, {P:s}:n (target -> parked count) and {P:s}:qt
--       (target -> pattern), then last the counter hash qc ({P:quota}: every shard in one
--       call; Redis Cluster: {P:s}:q, one call per shard)
-- ARGV: 1 = the mark (the pattern list, one per line; '' for none), 2 = '1' to count again
--       even when qc holds this mark, else '0'; then pairs target, pattern ('' = none):
--       how the caller's first-matching rule classifies every target it read from n
-- returns: {0} when it counted, {1} when qc held the mark already (nothing changed), or
--       {2, target, ...}: targets of n the caller did not classify (parked since it read
--       n; at most 1000): nothing changed, the caller classifies them and calls again
-- One step for all its keys: the counts are exact whatever ran before (parks of replicas
-- with other patterns, or a dataset that lost its counts). Work: the fields of the n hashes
-- (targets per shard), not the messages.
-- flags: none: on a full Redis its writes are refused and the counts stay as they were.

local qc = KEYS[#KEYS]
if ARGV[2] ~= '1' and redis.call('HGET', qc, '#') == ARGV[1] then return {'1'} end
local class = {}
for i = 3, #ARGV, 2 do class[ARGV[i]] = ARGV[i + 1] end
local counts, maps, unknown = {}, {}, {}
for s = 1, (#KEYS - 1) / 2 do
  local kv = redis.call('HGETALL', KEYS[2 * s - 1])
  local hset = {}
  for i = 1, #kv, 2 do
    local tgt = kv[i]
    if tgt ~= '' then
      local p = class[tgt]
      if p == nil then
        if #unknown < 1000 then unknown[#unknown + 1] = tgt end
      elseif p ~= '' then
        hset[#hset + 1] = tgt
        hset[#hset + 1] = p
        counts[p] = (counts[p] or 0) + tonumber(kv[i + 1])
      end
    end
  end
  maps[s] = hset
end
if #unknown > 0 then return {'2', unpack(unknown)} end

-- Emptied field by field: the bridge's ACL has no DEL.
local function empty(key)
  local old = redis.call('HKEYS', key)
  for i = 1, #old, 1000 do redis.call('HDEL', key, unpack(old, i, math.min(i + 999, #old))) end
end
local function set(key, fields)
  for i = 1, #fields, 1000 do redis.call('HSET', key, unpack(fields, i, math.min(i + 999, #fields))) end
end
for s = 1, (#KEYS - 1) / 2 do
  empty(KEYS[2 * s])
  set(KEYS[2 * s], maps[s])
end
empty(qc)
local fields = {'#', ARGV[1]}
for p, c in pairs(counts) do
  if c > 0 then
    fields[#fields + 1] = 'p:' .. p
    fields[#fields + 1] = string.format('%d', c)
  end
end
set(qc, fields)
return {'0'}
