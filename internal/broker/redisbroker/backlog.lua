-- backlog.lua: what waits in a shard's lanes, for operators and autoscalers:
-- the tasks, their elements, and when the oldest of them was submitted.
-- One pass over the lanes of the rings, a few commands a lane, whatever the
-- lanes hold: the elements come from the counter beside each lane, and the
-- age of a lane's head from the submit times beside it (see unlane).
-- KEYS[1], ...: the shard's rings   ARGV[1] key base "<prefix>:{<queue>}:"
-- A key holding foreign data is set aside (set_aside).
-- Returns {tasks, elements, when the longest-waiting task was submitted
-- (Redis ms; 0 if none waits), the Redis clock (ms)}.
local tasks, elements, oldest = 0, 0, 0
for i = 1, #KEYS do
  for _, lane in ipairs(guarded('LRANGE', KEYS[i], 0, -1)) do
    local list = ARGV[1] .. 'l:' .. lane
    local n = guarded('LLEN', list)
    if n > 0 then
      tasks = tasks + n
      elements = elements + math.max(tonumber(guarded('GET', list .. ':e') or '0') or 0, 0)
      local seq = seq_of(redis.call('LINDEX', list, 0))
      local at = seq and guarded('ZRANGE', list .. ':t', seq, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1)[1]
      at = at and tonumber(string.match(at, ':(%d+)$'))
      if at and (oldest == 0 or at < oldest) then
        oldest = at
      end
    end
  end
end
return {tasks, elements, oldest, now()}
