-- tombs: tombstones of delivered or cancelled source messages, shared by park, ack, cancel
-- and bulk. A tombstone is a member (the source id) of the SET tn ({P:s}:tn, the newer
-- generation) or to ({P:s}:to, the older one). The newer set is created with an expiry of
-- 2 x TTL + TTL / 2 and takes tombstones while younger than TTL; the first write after
-- that moves it to the older name (RENAME, after UNLINK of the older set, whose
-- tombstones are then at least 2 x TTL old: freed off the main thread) and starts a new
-- one. So each tombstone lives at least TTL and at most 2.5 x TTL (2 x TTL while
-- deliveries go on), Redis deletes idle sets by their expiry, and nothing sweeps: a set
-- entry costs about half a sorted-set entry. park checks both sets (two SMISMEMBER per
-- chunk). Key names are fixed, never from input or the clock.
-- Uses the script's now (Redis TIME, ms) and CHUNK. delaystore/scripts.go puts this file
-- in place of the line "--!include tombs.lua" of a script; it is not a script of its own.

-- tombAdd leaves tombstones of the source ids srcs for ttl ms (<= 0: none).
local function tombAdd(tn, to, srcs, ttl)
  if ttl <= 0 or #srcs == 0 then return end
  local left = redis.call('PTTL', tn)
  if left ~= -2 and left <= ttl + math.floor(ttl / 2) then -- older than TTL (-1: no expiry)
    redis.call('UNLINK', to)
    redis.call('RENAME', tn, to)
    if left == -1 then redis.call('PEXPIRE', to, ttl) end
    left = -2
  end
  for i = 1, #srcs, CHUNK do
    redis.call('SADD', tn, unpack(srcs, i, math.min(i + CHUNK - 1, #srcs)))
  end
  if left == -2 then redis.call('PEXPIRE', tn, 2 * ttl + math.floor(ttl / 2)) end
end

-- tombLive sets found[k] = true for each index k in ks whose source id srcs[k] has a live
-- tombstone.
local function tombLive(tn, to, srcs, ks, found)
  for i = 1, #ks, CHUNK do
    local last = math.min(i + CHUNK - 1, #ks)
    local names = {}
    for j = i, last do names[#names + 1] = srcs[ks[j]] end
    for _, key in ipairs({tn, to}) do
      local r = redis.call('SMISMEMBER', key, unpack(names))
      for j = 1, #r do
        if r[j] == 1 then found[ks[i + j - 1]] = true end
      end
    end
  end
end
