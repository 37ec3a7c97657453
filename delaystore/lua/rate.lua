#!lua flags=allow-oom
-- rate: hand out publish slots of one rate-limited target, shared by the fleet (GCRA, the
-- virtual-scheduling form of a token bucket; docs/design.md, "Per-target rate").
-- KEYS: 1 = {P:rate}:tat (hash target -> theoretical arrival time, Redis microseconds)
-- ARGV: 1 = target, 2 = slots wanted (>= 1), 3 = interval us (1e6 / rate, >= 1),
--       4 = horizon us (how far ahead of now slots are handed out)
-- returns: {now us, first slot us, slots granted}
-- The slots are first + i * interval for i < granted, first = max(tat, now); tat moves to
-- first + granted * interval. No slot lies beyond now + horizon: fewer may be granted than
-- wanted (0 when the horizon is full). The hash lives an hour after its last grant; a
-- field whose tat has passed counts as now, so an old field is harmless.
-- flags: allow-oom (first line, Redis >= 7): a full Redis must not stop the delivery of a
-- limited target (delivering is what frees memory); the write replaces a number of one
-- field per target. Without script flags (Redis 6, miniredis) the first line is commented
-- out (delaystore/scripts.go).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n, iv, hz = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tat < now then tat = now end
local room = math.floor((now + hz - tat) / iv)
if room < 0 then room = 0 end
local k = math.min(n, room)
if k > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', tat + k * iv))
  redis.call('PEXPIRE', KEYS[1], 3600000)
end
return {now, tat, k}
