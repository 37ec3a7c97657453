-- groups: the multi-shard calling convention of park, claim, ack and retry, put in place of
-- the line "--!include groups.lua" by delaystore/scripts.go (not a script of its own).
-- A call carries G groups, one per shard: KEYS are the groups' keys in order, the same
-- number per group (#KEYS / G); ARGV[1] = G, ARGV[2 .. G+1] = how many arguments each
-- group has, then the groups' arguments in order. On one Redis node (standalone, Sentinel)
-- Go sends every shard of a batch in one call; on Redis Cluster one call per shard (the
-- keys of a call must share a hash slot).

-- groups runs fn(keys, args) once per group, in order, and returns their results in one
-- array. A group whose run raises an error (a write refused for memory, a malformed
-- argument) has {err = message} in its place and the others run as usual: what the
-- failing group wrote before its error stays, as it would in a call of its own.
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
    local ok, res = pcall(fn, keys, args)
    if ok then
      out[i] = res
    elseif type(res) == 'table' and res.err then
      out[i] = res
    else
      out[i] = {err = tostring(res)}
    end
  end
  return out
end
