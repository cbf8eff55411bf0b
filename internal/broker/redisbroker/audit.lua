-- audit.lua: find a manager's outstanding tasks that Redis no longer keeps
-- anywhere a worker could reach them, and queue them again. A task in the
-- manager's task set (the truth: not answered, not withdrawn) waits in its
-- list (its batch's lane, or a worker's private list) or is held by a worker
-- (its held set). A key lost (evicted by a maxmemory-policy, deleted, set
-- aside for foreign data) leaves tasks in neither: each such task goes back
-- to the front of its lane (requeue), or of its worker's private list if
-- that worker is live (else its manager is told it is lost, as a reap
-- does). The attempt count is not raised: no worker was seen to die with
-- it. Every lane of the call that has tasks is put back in its ring if it
-- left it, and its entry in the manager's lanes hash written again if it is
-- gone, so that a lost ring or lanes hash also heals here. A task held by a
-- live worker whose held set was lost is queued again too: it may run
-- twice, and its first result counts (finish.lua).
-- It also names the tasks of the call not in the task set, with the length
-- of the manager's result list: a task still outstanding for its manager,
-- absent from the set at two audits while the list was empty, had its
-- result lost with the list (the manager submits it again).
-- The cost is proportional to the tasks of the call: one LRANGE of each
-- list they name, then, only if some task is in no list, one SMEMBERS of
-- each live worker's held set, and an HEXISTS per task found in neither.
-- KEYS[1] task set of the manager   KEYS[2] workers sorted set
-- KEYS[3] idle set   KEYS[4] lanes of the manager (HASH lane -> what its
-- tasks call)   KEYS[5] result list of the manager
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] TTL of the manager's keys, ms
-- ARGV[3], ...: groups, each: the worker id of the private list ("" for the
-- public lane), the lane ("<manager id>.<lane>"), what its tasks call (see
-- submit.lua), the number of task ids k, then the k task ids
-- A key holding foreign data is set aside (set_aside), but the task set:
-- the call fails (redisbroker names the key), and its manager fails its tasks and
-- sets it aside.
-- Returns {tasks queued again, private tasks lost, lanes put back in their
-- ring or lanes hash, the length of the result list, the task ids not in
-- the task set...}.
local base, ttl = ARGV[1], ARGV[2]
local requeued, lost, healed = 0, 0, 0
local absent = {}
local groups = {}
local i = 3
while i <= #ARGV do
  local k = tonumber(ARGV[i + 3])
  groups[#groups + 1] = {wid = ARGV[i], lane = ARGV[i + 1], calls = ARGV[i + 2], from = i + 4, to = i + 3 + k}
  i = i + 4 + k
end

-- Where each task waits: the ids of every list the groups name.
local listed = {}
local lists = {}
for _, g in ipairs(groups) do
  g.list = g.wid == '' and base .. 'l:' .. g.lane or base .. 'w:' .. g.wid .. ':private'
  if not lists[g.list] then
    lists[g.list] = true
    for _, tid in ipairs(guarded('LRANGE', g.list, 0, -1)) do
      listed[tid] = true
    end
  end
end

-- held is every task a live worker holds, read once, when some task is in
-- no list.
local held = nil
local function is_held(tid)
  if not held then
    held = {}
    for _, wid in ipairs(guarded('ZRANGE', KEYS[2], 0, -1)) do
      for _, member in ipairs(guarded('SMEMBERS', base .. 'w:' .. wid .. ':held')) do
        held[(string.gsub(member, '^!', ''))] = true
      end
    end
  end
  return held[tid] == true
end

local rung = {}
for _, g in ipairs(groups) do
  local back = {}
  for j = g.from, g.to do
    local tid = ARGV[j]
    if not listed[tid] and not is_held(tid) then
      if redis.call('HEXISTS', KEYS[1], tid) == 1 then
        back[#back + 1] = tid
      else
        absent[#absent + 1] = tid
      end
    end
  end
  if g.wid == '' then
    -- Its lane's entry first: a take passes a lane it has none for. Only
    -- for a lane with tasks in Redis (to queue again, or queued): the
    -- manager lists its tasks as outstanding before its submit writes the
    -- entry with them, and an audit between the two must not heal what
    -- was never lost.
    local l = string.match(g.lane, '%.(.+)$')
    if l and (#back > 0 or guarded('LLEN', g.list) > 0) and guarded('HEXISTS', KEYS[4], l) == 0 then
      redis.call('HSET', KEYS[4], l, g.calls)
      redis.call('PEXPIRE', KEYS[4], ttl)
      healed = healed + 1
    end
    for j = #back, 1, -1 do
      requeue(base, back[j])
    end
    requeued = requeued + #back
    if #back > 0 then
      redis.call('PEXPIRE', g.list, ttl)
    elseif g.from <= g.to and guarded('LLEN', g.list) > 0 then
      -- A lane with tasks that left its ring (the ring lost) is put back.
      local _, ring = lane_of(base, ARGV[g.from])
      if not guarded('LPOS', ring, g.lane) then
        redis.call('RPUSH', ring, g.lane)
        healed = healed + 1
      end
    end
  elseif #back > 0 then
    if guarded('ZSCORE', KEYS[2], g.wid) then
      for j = #back, 1, -1 do
        redis.call('LPUSH', g.list, back[j])
      end
      redis.call('PEXPIRE', g.list, ttl)
      requeued = requeued + #back
      if not rung[g.wid] then
        rung[g.wid] = true
        ring_worker(base, g.wid)
      end
    else
      local m = manager(base, back[1])
      for _, tid in ipairs(back) do
        fail(m, tid, lost_entry(tid, g.wid))
        lost = lost + 1
      end
    end
  end
end

if requeued > 0 then
  for _, w in ipairs(guarded('SPOP', KEYS[3], requeued)) do
    ring_worker(base, w)
  end
end
local out = {requeued, lost, healed, guarded('LLEN', KEYS[5])}
for j = 1, #absent do
  out[#out + 1] = absent[j]
end
return out
