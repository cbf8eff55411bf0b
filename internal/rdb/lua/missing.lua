-- missing.lua: say which of a manager's outstanding tasks its task set no
-- longer holds, after Redis lost writes.
-- KEYS[1] task set of the manager
-- ARGV[1], ...: task ids
-- Returns the task ids not in the set.
local out = {}
for i = 1, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    out[#out + 1] = ARGV[i]
  end
end
return out
