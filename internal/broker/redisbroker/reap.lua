-- reap.lua: give the tasks of workers whose lease expired back to the queue.
-- Whoever runs it first (a waiting manager or any live worker) reaps; running
-- it again finds nothing. Deadlines are compared on the Redis clock.
-- A public task a dead worker held goes to the front of its lane (and the
-- lane back in its ring) with its lost-attempt count raised (the worker that takes it next checks the
-- count against the batch's budget). A private task, held or still queued,
-- cannot run elsewhere: its manager gets a "lost <task id> <worker id>" entry
-- in place of a result. Each returns its slot of its function's
-- concurrency cap (unhold_limited): a dead worker's slots come back within
-- its lease.
-- A call handles at most BUDGET task ids, a few commands each, popped from
-- the dead workers' held sets (SPOP) and private lists (LPOP), and looks at
-- most at ARGV[2] dead workers: a popped id is gone from its worker, so a
-- call that runs after (another reaper's) never handles it again. Only a
-- worker whose held set and private list are both empty is reaped: its keys
-- deleted, itself out of the workers set; one left part-way stays there,
-- its lease lapsed, for the next call. Its caller calls again until the
-- script says no work is left.
-- A reaped worker that has an info hash here (shard 0) is listed gone for
-- operators, with its last info: "stopped" if it retired itself (see
-- heartbeat.lua), else "dead" (its lease lapsed).
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- KEYS[2] ring of the default priority (names the slot)
-- KEYS[3] idle set   KEYS[4] gone sorted set (wid -> when, ms)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] most workers to look at in one call
-- ARGV[3] how long a gone worker stays listed, ms
-- A key holding foreign data is set aside (set_aside): a reap never fails
-- for it.
-- Returns {workers reaped, tasks re-queued, private tasks lost, 1 if work
-- may be left (a dead worker it looked at still holds tasks, or it looked
-- at ARGV[2] of them), else 0}.
local base, gone_for = ARGV[1], tonumber(ARGV[3])
local t = now()
local most = tonumber(ARGV[2])
local dead = guarded('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, most)
local budget = BUDGET
local reaped, requeued, lost = 0, 0, 0
local more = #dead == most and 1 or 0

local function lose(tid, wid)
  if wanted(base, tid) then
    fail(manager(base, tid), tid, lost_entry(tid, wid))
    lost = lost + 1
  end
end

-- release gives back a member of worker wid's held set, popped from it.
local function release(member, wid)
  unhold_limited(base, (string.gsub(member, '^!', '')))
  if string.sub(member, 1, 1) == '!' then
    lose(string.sub(member, 2), wid)
  elseif wanted(base, member) then
    local m = manager(base, member)
    guarded('HINCRBY', m .. ':attempts', member, 1)
    redis.call('PEXPIRE', m .. ':attempts', math.max(redis.call('PTTL', m .. ':tasks'), 1000))
    requeue(base, member)
    requeued = requeued + 1
  end
end

for _, wid in ipairs(dead) do
  local w = base .. 'w:' .. wid
  if budget > 0 then
    local members = guarded('SPOP', w .. ':held', budget)
    budget = budget - #members
    for _, member in ipairs(members) do
      release(member, wid)
    end
  end
  if budget > 0 then
    local tids = guarded('LPOP', w .. ':private', budget) or {} -- nil: no list
    budget = budget - #tids
    for _, tid in ipairs(tids) do
      lose(tid, wid)
    end
  end
  if guarded('SCARD', w .. ':held') > 0 or guarded('LLEN', w .. ':private') > 0 then
    more = 1
    break
  end
  redis.call('DEL', w .. ':held', w .. ':private', w .. ':bell', w .. ':drain')
  local state = guarded('HGET', w .. ':info', 'state')
  if state then
    if state ~= 'stopped' then
      redis.call('HSET', w .. ':info', 'state', 'dead')
    end
    redis.call('HSET', w .. ':info', 'gone', t)
    redis.call('PEXPIRE', w .. ':info', gone_for)
    guarded('ZADD', KEYS[4], t, wid)
  end
  redis.call('ZREM', KEYS[1], wid)
  guarded('SREM', KEYS[3], wid)
  reaped = reaped + 1
end

if reaped > 0 then
  guarded('ZREMRANGEBYSCORE', KEYS[4], '-inf', t - gone_for)
  redis.call('PEXPIRE', KEYS[4], gone_for)
end

if requeued > 0 then
  for _, w in ipairs(guarded('SPOP', KEYS[3], requeued)) do
    ring_worker(base, w)
  end
end
return {reaped, requeued, lost, more}
