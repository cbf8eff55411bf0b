-- giveback.lua: put back tasks a live worker holds but will not run or report.
-- A take whose reply was lost on a dropped connection (and that the client
-- then retried) leaves tasks in the worker's held set that the worker never
-- received; no lease expires to free them, since the worker lives. The worker
-- finds them by comparing its held set with what it runs, and gives them back
-- to the front of the list they came from; a stopping worker gives back the
-- tasks it took ahead and did not start, and those still running when its
-- grace ends. The attempt count is raised for a task that ran (ARGV[2]), as a
-- reap raises it, so that the batch's attempt budget bounds how often it runs
-- again; not for one never run. Its slot of its function's concurrency cap
-- returns (unhold_limited); what it took of its rate does not.
-- KEYS[1] held set of the worker   KEYS[2] ring of the default priority
-- (names the slot; a public task goes back to its lane)
-- KEYS[3] private list of the worker
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] "1" if the tasks ran, else "0"
-- ARGV[3], ...: held members to give back
-- A key holding foreign data is set aside (set_aside).
-- Returns the number of tasks given back.
local base = ARGV[1]
local ran = ARGV[2] == '1'
local n = 0
for i = 3, #ARGV do
  local member = ARGV[i]
  if guarded('SREM', KEYS[1], member) == 1 then
    local private = string.sub(member, 1, 1) == '!'
    local tid = private and string.sub(member, 2) or member
    unhold_limited(base, tid)
    if wanted(base, tid) then
      if ran then
        local m = manager(base, tid)
        guarded('HINCRBY', m .. ':attempts', tid, 1)
        redis.call('PEXPIRE', m .. ':attempts', math.max(redis.call('PTTL', m .. ':tasks'), 1000))
      end
      if private then
        guarded('LPUSH', KEYS[3], tid)
      else
        requeue(base, tid)
      end
      n = n + 1
    end
  end
end
return n
