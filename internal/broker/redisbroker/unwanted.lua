-- unwanted.lua: of the tasks a worker is running, say which their managers no
-- longer want (cancelled, ended, or the manager's keys are gone), so the
-- worker can cancel their contexts; and which of them a backup's race ended:
-- the task got a copy (the mark backup.lua left in the attempt counts, which
-- a cancel removes with the task) and its other copy's result came first.
-- KEYS[1] held set of the worker (names the slot; not read)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2], ...: task ids
-- Returns the task ids no longer wanted, "+"-prefixed if a race ended them.
local base = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local tid = ARGV[i]
  if not wanted(base, tid) then
    local m = manager(base, tid)
    if m and guarded('HEXISTS', m .. ':attempts', COPIED .. tid) == 1 then
      tid = COPIED .. tid
    end
    out[#out + 1] = tid
  end
end
return out
