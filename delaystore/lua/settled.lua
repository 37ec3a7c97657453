-- settled: the reply of one group of ack and retry, put in place of the line
-- "--!include settled.lua" by delaystore/scripts.go (not a script of its own).
-- settled(z, n) returns {n, the score of z's head or -1 when z is empty}: how many
-- messages the group settled, and when the shard's next message is eligible (-1 also when
-- only held entries of ordering keys are left: chain.lua).
local function settled(z, n)
  local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  local nxt = -1
  if head[2] then nxt = tonumber(head[2]) end
  if nxt >= 1125899906842625 then nxt = -1 end -- only held entries of ordering keys (chain.lua)
  return {n, nxt}
end
