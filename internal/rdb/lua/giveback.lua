-- giveback.lua: put back tasks a live worker holds but does not know of.
-- A take whose reply was lost on a dropped connection (and that the client
-- then retried) leaves tasks in the worker's held set that the worker never
-- received; no lease expires to free them, since the worker lives. The worker
-- finds them by comparing its held set with what it runs, and gives them back
-- to the front of the list they came from. The attempt count is not raised:
-- the task was never run. Its slot of its function's concurrency cap
-- returns (unhold_limited); what it took of its rate does not.
-- KEYS[1] held set of the worker   KEYS[2] ring of the default priority
-- (names the slot; a public task goes back to its lane)
-- KEYS[3] private list of the worker
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2], ...: held members to give back
-- Returns the number of tasks given back.
local base = ARGV[1]
local n = 0
for i = 2, #ARGV do
  local member = ARGV[i]
  if redis.call('SREM', KEYS[1], member) == 1 then
    local private = string.sub(member, 1, 1) == '!'
    local tid = private and string.sub(member, 2) or member
    unhold_limited(base, tid)
    if wanted(base, tid) then
      if private then
        redis.call('LPUSH', KEYS[3], tid)
      else
        requeue(base, tid)
      end
      n = n + 1
    end
  end
end
return n
