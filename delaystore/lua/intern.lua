-- intern: give names (targets, sources) their codes in one shard (docs/design.md,
-- "Interned names").
-- KEYS: 1 = {P:s}:nm (hash: '=<name>' -> code, '<code>' -> name, '#' -> codes given,
--       '@' -> the table's generation), 2 = {P:s}:z (the shard's entries: only its size is
--       read, when '#' is absent)
-- ARGV: 1 = the most codes the shard gives (maxNames), 2 = the store's shard count,
--       3 = this shard's number, 4 = the generation the caller's table has, 5 = a fresh
--       random generation, 6... = names (never empty, never starting with the byte 0)
-- returns: 1 when the table's generation was ARGV[4] before this call (else 0), plus 2 when
-- the call gave a code (the generation is then ARGV[5]), then per
-- name its code, or 0 when it has none and the shard gave its last code already (the name
-- is then stored whole). The k-th code a shard gives is k x shards + shard: codes of
-- different shards never collide.
-- Every call that gives a code sets '@' to ARGV[5], so two reads of '@' that agree saw the
-- same table: a reader decodes codes only with the table of the generation it read with
-- them. A code is never changed or reused while the key lives: the name -> code and
-- code -> name fields are written together, and '#' only grows. A shard that holds entries
-- but no '#' lost its names (the key was deleted: a failover loses codes only with the
-- entries written after them): it gives no code until it is empty, so that no code of an
-- entry that outlived its name is ever given to another name (such an entry reads as
-- corrupt).
-- No flags: a full Redis refuses it when it would write, as it refuses the park that
-- would follow.
local key = KEYS[1]
local most, shards, shard = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local given = redis.call('HGET', key, '#')
if not given and redis.call('ZCARD', KEYS[2]) > 0 then most = 0 end
local matched = 0
if (redis.call('HGET', key, '@') or '') == ARGV[4] then matched = 1 end
local out = {matched}
local gave = false
for i = 6, #ARGV do
  local name = ARGV[i]
  local code = redis.call('HGET', key, '=' .. name)
  if code then
    out[#out + 1] = tonumber(code)
  elseif tonumber(redis.call('HGET', key, '#') or '0') >= most then
    out[#out + 1] = 0
  else
    local c = redis.call('HINCRBY', key, '#', 1) * shards + shard
    local text = string.format('%d', c)
    redis.call('HSET', key, '=' .. name, text, text, name)
    out[#out + 1] = c
    gave = true
  end
end
if gave then
  redis.call('HSET', key, '@', ARGV[5])
  out[1] = matched + 2
end
return out
