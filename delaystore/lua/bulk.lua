#!lua flags=allow-oom
-- bulk: change picked messages of one shard that are not in delivery (a bulk change).
-- KEYS: 1 = {P:s}:z, 2 = {P:s}:m, 3 = {P:s}:seq, 4 = {P:s}:tn (newer tombstones), 5 = {P:s}:r,
--       6 = {P:s}:n (parked count per target: -1 per cancelled message),
--       7 = {P:s}:b (progress of resumable operations: op id -> progress),
--       8 = {P:s}:bx (op id -> when its progress was last written, ms: the expiry index),
--       9 = {P:s}:qt, 10 = the quota counter hash (quota.lua), 11 = {P:s}:to (older
--       tombstones), 12 = {P:s}:k (chains of ordering keys: chain.lua), 13 = {P:s}:ki
-- ARGV: 1 = op ('cancel' | 'shift' | 'at' | 'now'), 2 = shift ms (signed) or due ms,
--       3 = cancel: tombstone TTL ms (<= 0: none); shift and at: the maximum delay ms
--       (the bound), 4 = the shard's wake channel (P:wake:<s>),
--       5 = shard number, 6 = op id of a resumable operation ('': none, 7-10 unused),
--       7 = the progress this call continues ('' at the start), 8 = the position after
--       this chunk ('<pass>,<score>,<id>'; pass 'd': the shard is through), 9 = messages
--       the caller counts as matched in this chunk, 10 = how long progress is kept (ms),
--       then from 11 per message 3 values: id, version and target read by scan;
--       a version written '>v' (cancel only) picks the entry only when it is a recurring
--       message for that target with a version newer than v, the pass's fence (an entry
--       newer than the pass: a firing that re-parked itself, not a message parked since)
-- returns: {changed count, of them picked by a '>v' version, progress now ('' without
-- an op id)}; {-1, 0, progress} when the stored progress is not ARGV[7]: another run of
-- the operation went on meanwhile, and this call changed nothing.
-- Progress (docs/design.md, "Resumable bulk operations") is written in the same call as
-- the changes it counts: '<matched>,<changed>,<pass>,<score>,<id>', matched adding ARGV[9]
-- and the '>v' picks, changed this call's changes. A crash leaves either both or neither.
-- Progress older than ARGV[10] ms (an operation never finished) is dropped, a few entries
-- per call, and both keys expire after ARGV[10] ms without a write.
-- A message is changed only when its stored version is the one read (fence: replaced,
-- cancelled or fired meanwhile: left alone) and it is waiting: its score equals its due
-- time, or it is in the retry set (waiting for its backoff), and it is not claimed by a
-- replica whose lease runs (an even score, claim.lua's mark, other than its due time,
-- after now, as cancel.lua reads it: a retried message claimed again is in delivery). A
-- claimed message and one put back by egress are left alone. Except
-- a recurring message (recurring: its body ends with the schedule) under cancel: it is
-- cancelled in delivery too, and so is the next occurrence its firing parked since the
-- scan (a newer version, same target): the entry is gone, so the firing's re-park
-- (retry.lua mode n) is fenced out and the schedule stops (the firing in flight may
-- still be published, unless it was claimed ahead of its due time and is still held: a
-- recurring message cancelled in delivery is withdrawn on the wake channel,
-- "<shard>:x<version>:<id>", as cancel.lua does). cancel
-- deletes it as cancel.lua does (tombstone of its source id); shift, at and now give it
-- a new version (INCR seq), the due time due + shift, the given one, or the Redis time,
-- scored there, out of the retry set; attempts are kept. The new due of shift and at is
-- bounded as contract.Horizon bounds a due time computed from input, against the Redis
-- time: below 0 (before 1970) it is 0 (due at once); beyond now + the bound (or not a
-- finite number) the message is not changed and not counted: never wrapped (a formatted
-- 2^63 is -2^63: due at once), never clamped. A wake "<shard>:<due>" is published when
-- the earliest new due is earlier than the shard's head before the call.
-- A held entry of an ordering key (scored HELD: chain.lua) is waiting too: cancel takes it
-- out of its chain (as it does a keyed head, releasing the next); shift, at and now change
-- its due time and keep it held, in its place.
-- flags: allow-oom (first line, Redis >= 7): cancelling frees memory; a move rewrites an
-- entry of the same size. Without script flags the first line is commented out.
local z, m, seq, tz, r = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, val = ARGV[1], tonumber(ARGV[2])
local ttl, bound = tonumber(ARGV[3]), tonumber(ARGV[3]) -- cancel: ttl; shift, at: bound
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local CHUNK = 1000

--!include envelope.lua

--!include tombs.lua

local tombs = {} -- source ids of the cancelled entries

--!include quota.lua

--!include chain.lua

-- bounded is the new due of a message stored with due under op 'shift', 'at' or 'now',
-- or nil when it lies beyond now + ARGV[3] ms (shift, at) or is no finite number.
local function bounded(op, due)
  local newDue = now
  if op == 'shift' then newDue = tonumber(due) + val end
  if op == 'at' then newDue = val end
  if op ~= 'now' and not (newDue <= now + bound) then return nil end -- beyond, or NaN
  return math.max(newDue, 0)
end

local opid, prog = ARGV[6], ''
if opid ~= '' then
  prog = redis.call('HGET', KEYS[7], opid) or ''
  if prog ~= ARGV[7] then return {-1, 0, prog} end
end

local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
local headScore = nil
if head[2] then headScore = tonumber(head[2]) end
local earliest = nil
local n, newer = 0, 0
local cancelled = {} -- target -> minus its cancelled messages, for the quota counts
local withdrawn = {} -- wake payloads of the entries cancelled in delivery
for i = 11, #ARGV, 3 do
  local id, want = ARGV[i], ARGV[i + 1]
  local lineage = string.sub(want, 1, 1) == '>'
  if lineage then want = string.sub(want, 2) end
  local env = redis.call('HGET', m, id)
  local score = redis.call('ZSCORE', z, id)
  if env and score then
    local version, attempts, due, p = entry(env)
    local s = tonumber(score)
    local held = s % 2 == 0 and s ~= due and s > now
    local chained = s >= HELD
    local waiting = not held and (s == due or chained or redis.call('ZSCORE', r, id))
    local pick = not lineage and version == tonumber(want) and waiting and (op == 'cancel' or bounded(op, due))
    if not pick and op == 'cancel' and version and recurring(env, p) then
      pick = (not lineage and version == tonumber(want)) or (version > tonumber(want) and targetOf(env, p) == ARGV[i + 2])
    end
    if pick and lineage then newer = newer + 1 end
    if pick then
      if op == 'cancel' then
        redis.call('ZREM', z, id)
        redis.call('HDEL', m, id)
        redis.call('ZREM', r, id)
        local kv = redis.call('HGET', KEYS[13], id)
        if kv then chainLeave(z, m, KEYS[12], KEYS[13], id, kv) end
        if not waiting then
          withdrawn[#withdrawn + 1] = ARGV[5] .. ':x' .. string.format('%d', version) .. ':' .. id
        end
        local tgt = targetOf(env, p)
        count(KEYS[6], {[tgt] = -1})
        cancelled[tgt] = (cancelled[tgt] or 0) - 1
        local src = sourceOf(env, p, id)
        if src ~= '' then tombs[#tombs + 1] = src end
      else
        local newDue = bounded(op, due)
        local v = redis.call('INCR', seq)
        local d = string.format('%d', newDue)
        redis.call('HSET', m, id, header(v, attempts, newDue) .. string.sub(env, p))
        if not chained then
          redis.call('ZADD', z, d, id)
          if earliest == nil or newDue < earliest then earliest = newDue end
        end
        redis.call('ZREM', r, id)
      end
      n = n + 1
    end
  end
end
quotaSettle(KEYS[9], KEYS[10], KEYS[6], cancelled)
tombAdd(tz, KEYS[11], tombs, ttl)
if earliest ~= nil and (headScore == nil or earliest < headScore) then
  redis.call('PUBLISH', ARGV[4], ARGV[5] .. ':' .. string.format('%d', earliest))
end
for _, w in ipairs(withdrawn) do redis.call('PUBLISH', ARGV[4], w) end
if opid ~= '' then
  local pm, pc = 0, 0
  if prog ~= '' then
    local a, b = string.match(prog, '^(%d+),(%d+),')
    pm, pc = tonumber(a), tonumber(b)
  end
  prog = string.format('%d,%d,', pm + tonumber(ARGV[9]) + newer, pc + n) .. ARGV[8]
  local keep = tonumber(ARGV[10])
  redis.call('HSET', KEYS[7], opid, prog)
  redis.call('ZADD', KEYS[8], string.format('%d', now), opid)
  local old = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', string.format('(%d', now - keep), 'LIMIT', 0, 8)
  for _, o in ipairs(old) do
    redis.call('HDEL', KEYS[7], o)
    redis.call('ZREM', KEYS[8], o)
  end
  redis.call('PEXPIRE', KEYS[7], keep)
  redis.call('PEXPIRE', KEYS[8], keep)
end
return {n, newer, prog}
