-- depth.lua: count the task ids queued in a shard's lanes.
-- KEYS[1], ...: the shard's rings   ARGV[1] key base "<prefix>:{<queue>}:"
-- A key holding foreign data is set aside (set_aside).
-- Returns the count.
local n = 0
for i = 1, #KEYS do
  for _, lane in ipairs(guarded('LRANGE', KEYS[i], 0, -1)) do
    n = n + guarded('LLEN', ARGV[1] .. 'l:' .. lane)
  end
end
return n
