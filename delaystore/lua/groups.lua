-- groups: the multi-shard calling convention of park, claim, ack and retry, put in place of
-- the line "--!include groups.lua" by delaystore/scripts.go (not a script of its own).
-- A call carries G groups, one per shard: KEYS are the groups' keys in order, the same
-- number per group (#KEYS / G); ARGV[1] = G, ARGV[2 .. G+1] = how many arguments each
-- group has, then the groups' arguments in order. On one Redis node (standalone, Sentinel)
-- Go sends every shard of a batch in one call; on Redis Cluster one call per shard (the
-- keys of a call must share a hash slot).

-- groups runs fn(keys, args) once per group, in order, and returns their results in one
-- array. An error in a group (a key of the wrong type, a write refused for memory) ends
-- the run and is the answer for every group of the call; what the groups before it wrote
-- stays (as in any script). Go sends the groups of a call that failed on a script error
-- again, one call each (delaystore/groups.go, runList), which every script allows. Not
-- under pcall: Redis 7.0 answers a write refused for memory inside pcall twice, which
-- shifts every later reply on the connection (TestRefusedRunAnswersOnce).
local function groups(fn)
  local g = tonumber(ARGV[1])
  local nk = #KEYS / g
  local out, pos = {}, g + 2
  for i = 1, g do
    local keys, args = {}, {}
    for j = 1, nk do keys[j] = KEYS[(i - 1) * nk + j] end
    local n = tonumber(ARGV[i + 1])
    for j = 1, n do args[j] = ARGV[pos + j - 1] end
    pos = pos + n
    out[i] = fn(keys, args)
  end
  return out
end
