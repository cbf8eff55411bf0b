-- unwanted.lua: of the tasks a worker is running, say which their managers no
-- longer want (cancelled, or the manager's keys are gone), so the worker can
-- cancel their contexts.
-- KEYS[1] held set of the worker (names the slot; not read)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2], ...: task ids
-- Returns the task ids no longer wanted.
local base = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local tid = ARGV[i]
  if not wanted(base, tid) then
    out[#out + 1] = tid
  end
end
return out
