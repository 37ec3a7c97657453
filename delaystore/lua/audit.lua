#!lua flags=allow-oom
-- audit: write the audit log (docs/design.md, "Audit log").
-- KEYS: 1 = {P:audit}:z (op id -> start, Redis ms), 2 = {P:audit}:e (op id -> entry, JSON
--       written by the caller, never changed), 3 = {P:audit}:s (op id -> state:
--       '<state>,<lease until ms>,<matched>,<changed>,<owner>')
-- ARGV: 1 = mode:
--   'begin': 2 = op id, 3 = entry, 4 = owner, 5 = lease ms, 6 = retention ms,
--            7 = most entries kept. Adds the entry as running, leased to owner for lease
--            ms; an op id already there: error. Drops a few entries older than the
--            retention and, over the most kept, the oldest; the keys expire after the
--            retention without a begin.
--            returns: the start (Redis ms)
--   'claim': 2 = op id, 3 = owner, 4 = lease ms. Takes the operation over for owner
--            unless it is done, or running under another owner's unexpired lease.
--            returns: {'missing'} | {'done', matched, changed, entry} | {'busy', lease ms left} |
--            {'ok', matched, changed, entry}
--   'set':   2 = op id, 3 = owner (must hold it; '' takes an unowned one), 4 = state,
--            5 = lease ms (running: its lease from now; else ignored), 6 = owner after
--            ('': released), 7 = matched, 8 = changed.
--            returns: 1, or 0 when owner does not hold it (another run took it over, or
--            the entry is gone).
-- A running entry whose lease ran out is shown as interrupted (auditlist.lua).
-- flags: allow-oom (first line, Redis >= 7): an audit entry is small, and a full Redis
-- must still record the changes that free it.
local z, e, s = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[1]

local function parse(v)
  local st, lease, m, c, owner = string.match(v, '^(%a+),(%d+),(%d+),(%d+),(.*)$')
  return st, tonumber(lease), tonumber(m), tonumber(c), owner
end

local function drop(ids)
  for _, id in ipairs(ids) do
    redis.call('ZREM', z, id)
    redis.call('HDEL', e, id)
    redis.call('HDEL', s, id)
  end
end

if mode == 'begin' then
  local id, keep, most = ARGV[2], tonumber(ARGV[6]), tonumber(ARGV[7])
  if redis.call('ZSCORE', z, id) then return redis.error_reply('op id exists') end
  drop(redis.call('ZRANGEBYSCORE', z, '-inf', string.format('(%d', now - keep), 'LIMIT', 0, 64))
  local over = redis.call('ZCARD', z) + 1 - most
  if over > 0 then drop(redis.call('ZRANGE', z, 0, math.min(over, 64) - 1)) end
  redis.call('ZADD', z, string.format('%d', now), id)
  redis.call('HSET', e, id, ARGV[3])
  redis.call('HSET', s, id, string.format('running,%d,0,0,', now + tonumber(ARGV[5])) .. ARGV[4])
  for _, k in ipairs({z, e, s}) do redis.call('PEXPIRE', k, keep) end
  return now
end

local v = redis.call('HGET', s, ARGV[2])
if mode == 'claim' then
  if not v then return {'missing'} end
  local st, lease, m, c, owner = parse(v)
  if st == 'done' then return {'done', m, c, redis.call('HGET', e, ARGV[2]) or ''} end
  if st == 'running' and owner ~= '' and lease > now then return {'busy', lease - now} end
  redis.call('HSET', s, ARGV[2], string.format('running,%d,%d,%d,', now + tonumber(ARGV[4]), m, c) .. ARGV[3])
  return {'ok', m, c, redis.call('HGET', e, ARGV[2]) or ''}
end

if mode == 'set' then
  if not v then return 0 end
  local st, lease, m, c, owner = parse(v)
  if owner ~= ARGV[3] then return 0 end
  local until_ = now
  if ARGV[4] == 'running' then until_ = now + tonumber(ARGV[5]) end
  redis.call('HSET', s, ARGV[2], string.format('%s,%d,%d,%d,', ARGV[4], until_, tonumber(ARGV[7]), tonumber(ARGV[8])) .. ARGV[6])
  return 1
end
return redis.error_reply('audit: unknown mode')
