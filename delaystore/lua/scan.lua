#!lua flags=no-writes
-- scan: read parked messages of one shard for a bulk change (read-only).
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:r (retry set: id -> due as scheduled),
--       4 = {P:s}:nm (the shard's interned names: a target held as a code is matched by
--       its name, one HGET per code and call), 5 = {P:s}:k (chains of ordering keys:
--       chain.lua), 6 = {P:s}:ki (keyed entries)
-- ARGV: 1 = 'z' (members of z by score) or 'r' (members of the retry set by due),
--       2 = min score, 3 = max score (both inclusive), 4 = cursor score, 5 = cursor id
--       ('' at the start), 6 = max members read, 7 = bytes of the body to return,
--       8... = literals a target must hold, in order (glob.Literals of the selector's
--       pattern; none: every target)
-- returns: {done (0|1), cursor id, cursor score, names generation ('@' of KEYS[4]: the
--           table Go decodes the heads' codes with; docs/design.md "Interned names"),
--           id1, z score1, prefix1, head1, body length1, in retry set (0|1), held by1,
--           ordering key1, id2, ...}; held by is the id of the message before a held entry
--           of an ordering key (scored HELD: its key's chain holds it), '' for any other
--           entry; ordering key is the entry's key (from KEYS[6], whatever the body's
--           length), '' for an entry without one
-- Members are read in score order, then id (bytes compared as Redis orders them: the
-- order of Go's strings, never Lua's locale-dependent '<'), strictly after the cursor
-- (score, id): by rank after the cursor member while it still has the cursor's score, or,
-- when the set does not hold it there (it moved or left, or it is another shard's: a list
-- cursor is one position for all shards), after the last member at that score whose id is
-- not after it (a binary search by rank among that score's members). At most ARGV[6] are
-- read; done is 1 when the set holds no more in [min, max]. The cursor to pass next is the
-- last member read (the cursor given when none was): never before the one given. With
-- 'r', a member whose z score lies in [min, max] is skipped (the 'z' pass reads it). prefix is
-- "<version>,<attempts>,<due>", head the first bytes of the body (the Go decoder reads
-- target and source from it). A member without an entry is skipped, and so is one whose
-- target lacks a literal (a prefilter: the caller still matches the pattern).
-- flags: no-writes (first line, Redis >= 7): it runs on a full Redis; bounded by ARGV[6].
--!include envelope.lua

local HELD = 1125899906842625 -- 2^50 + 1 (chain.lua)

-- keyOf returns the ordering key of a keyed entry's ki value v (its chain member's key).
local function keyOf(v)
  local member = string.sub(v, string.find(v, ',', 1, true) + 1)
  local n, j = uvarint(member, 1)
  return string.sub(member, j, j + n - 1)
end

-- heldBy returns the id of the member before that of ki's value v in its key's chain
-- ('' when none).
local function heldBy(v)
  local member = string.sub(v, string.find(v, ',', 1, true) + 1)
  local n, j = uvarint(member, 1)
  local p = string.sub(member, 1, j + n - 1)
  local prev = redis.call('ZREVRANGEBYLEX', KEYS[5], '(' .. member, '[' .. p, 'LIMIT', 0, 1)[1]
  if not prev then return '' end
  return string.sub(prev, #p + 9)
end

-- named: per code field read in this call, its name (false: the shard holds none).
local named = {}

-- nameOf returns the name a target field stands for: itself, or for a code (the byte 0
-- first: delaystore/names.go) the name the shard holds for it; nil when it holds none.
local function nameOf(target)
  if string.byte(target, 1) ~= 0 then return target end
  local n = named[target]
  if n == nil then
    local code = uvarint(target, 2)
    n = code and redis.call('HGET', KEYS[4], string.format('%d', code)) or false
    named[target] = n
  end
  return n or nil
end

-- holds reports whether target holds the literals ARGV[8...] in order, without overlap
-- (a code whose name the shard lacks passes: Go decides).
local function holds(target)
  if #ARGV < 8 then return true end
  target = nameOf(target)
  if not target then return true end
  local at = 1
  for i = 8, #ARGV do
    local _, e = string.find(target, ARGV[i], at, true)
    if not e then return false end
    at = e + 1
  end
  return true
end

-- idBefore reports whether id a sorts before id b in a sorted set (bytes compared
-- unsigned, a prefix first): Lua's '<' on strings follows the server's locale.
local function idBefore(a, b)
  if a == b then return false end
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local z, m, r = KEYS[1], KEYS[2], KEYS[3]
local key = z
if ARGV[1] == 'r' then key = r end
local min, max, cscore, cid = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local n, headLen = tonumber(ARGV[6]), tonumber(ARGV[7])
local start
if cid == '' then
  start = redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[2])
else
  local at = redis.call('ZSCORE', key, cid)
  if at and tonumber(at) == tonumber(cscore) then
    start = redis.call('ZRANK', key, cid) + 1
  else
    -- ranks [lo, hi) hold the cursor's score: the first whose id is after cid
    local lo = redis.call('ZCOUNT', key, '-inf', '(' .. cscore)
    local hi = redis.call('ZCOUNT', key, '-inf', cscore)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if idBefore(cid, redis.call('ZRANGE', key, mid, mid)[1]) then hi = mid else lo = mid + 1 end
    end
    start = lo
  end
end
local got = redis.call('ZRANGE', key, start, start + n - 1, 'WITHSCORES')
local ids, scores = {}, {}
local done = 1
if #got == 2 * n then done = 0 end
local lastId, lastScore = cid, cscore
for i = 1, #got, 2 do
  local id, sc = got[i], tonumber(got[i + 1])
  if sc > max then
    done = 1
    break
  end
  lastId, lastScore = id, got[i + 1]
  ids[#ids + 1] = id
  scores[#scores + 1] = got[i + 1]
end
local out = {done, lastId, lastScore, redis.call('HGET', KEYS[4], '@') or ''}
if #ids == 0 then return out end
local envs = redis.call('HMGET', m, unpack(ids))
local kvs = {} -- ki's values: a shard without keyed entries pays one EXISTS
if redis.call('EXISTS', KEYS[6]) == 1 then kvs = redis.call('HMGET', KEYS[6], unpack(ids)) end
for i = 1, #ids do
  local env = envs[i]
  local zscore, inRetry = scores[i], 0
  if env and #ARGV >= 8 then
    local p = select(4, entry(env))
    if not p or not holds(targetOf(env, p)) then env = nil end
  end
  if not env then
    -- skipped: no entry, or its target lacks a literal
  elseif key == r then
    inRetry = 1
    zscore = redis.call('ZSCORE', z, ids[i])
    if zscore and tonumber(zscore) >= min and tonumber(zscore) <= max then env = nil end
  elseif redis.call('ZSCORE', r, ids[i]) then
    inRetry = 1
  end
  local version, attempts, due, p
  if env and zscore then version, attempts, due, p = entry(env) end
  if version then
    out[#out + 1] = ids[i]
    out[#out + 1] = zscore
    out[#out + 1] = string.format('%d,%d,%d', version, attempts, due)
    out[#out + 1] = string.sub(env, p, p + headLen - 1)
    out[#out + 1] = #env - p + 1
    out[#out + 1] = inRetry
    local kv = kvs[i]
    if kv and tonumber(zscore) >= HELD then out[#out + 1] = heldBy(kv) else out[#out + 1] = '' end
    out[#out + 1] = kv and keyOf(kv) or ''
  end
end
return out
