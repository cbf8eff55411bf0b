-- take.lua: take up to n tasks for one worker, from its private list first and
-- then from the lanes of the rings, highest priority first, and record each in
-- the worker's held set in the same atomic step as the pop: a worker killed at
-- any instant loses no task.
-- Each batch queues its public tasks in a lane of its own, and a ring per
-- priority lists the lanes that have tasks. A take goes round the ring of a
-- priority, moving each lane it looks at from the front to the back, and
-- takes from each lane whose function (and reducer) the worker registered
-- with the same signature (ARGV[7], ...) at most its share of what the take
-- still wants (that, divided by the lanes of the ring), then, if the round
-- left room, goes round once more without the share. So the lanes of a
-- priority share the workers, in turns, whatever their sizes; a lane whose
-- function the worker does not serve is passed over, its tasks left for a
-- worker that does; a lane found empty leaves the ring. A higher priority is
-- emptied first.
-- A task its manager no longer wants (not in the manager's task set: cancelled,
-- finished, or the manager's keys expired) is dropped and never returned, so
-- it is never run.
-- A task lost before (its attempt count is above 0) is a suspect: it may be a
-- poison pill that kills its worker, taking along whatever else that worker
-- holds (running, waiting to run, or run and not yet reported). It is handed
-- out only to a worker that holds nothing: its held set here is empty (which
-- counts tasks of a take whose reply never reached it) and it says it holds
-- nothing on other shards (ARGV[6]); and alone, in a take of its own. The
-- worker then takes nothing more until the suspect's result is reported. So
-- a task can die beside a poison pill only on the pill's first run, before
-- anyone knew: it loses one attempt at most. A worker that holds something
-- leaves the suspect where it is, takes nothing after it, and is told
-- "suspect": it then waits until it holds nothing (reports all it holds,
-- gives back what it was never given) and takes again. A worker that holds
-- nothing looks for a suspect at the head of every lane it serves first, so
-- that it gets one before the lanes ahead of it in the ring fill its take.
-- A worker absent from the workers set (Redis lost it: a restart, FLUSHALL,
-- a failover, since its last heartbeat) is added back, with a deadline of one
-- lease from now, in the same step: else, killed before its next heartbeat,
-- it would hold tasks no reap ever finds.
-- A worker that is stopping leaves a "stop" token on its bell (RingStop): a
-- take then takes nothing, as it may run pipelined after the wait that token
-- ended.
-- If the take leaves every list empty (it took fewer than n, and not for a
-- suspect), the worker joins the idle set (and its stale bell tokens are
-- cleared) in this same step, so no submit can slip unseen between "found
-- no more" and "waiting for the bell"; the reply then ends with "drained",
-- and the worker's next take waits for its bell first.
-- KEYS[1] private list of the worker   KEYS[2] held set of the worker
-- KEYS[3] idle set   KEYS[4] bell of the worker
-- KEYS[5] workers sorted set (wid -> lease deadline, ms)
-- KEYS[6] the queue's list of shard names (see shards.lua; in shard 0, else
-- a key that never exists)
-- KEYS[7], ...: the rings, highest priority first
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] n, at least 1   ARGV[3] worker id
-- ARGV[4] the worker's lease, ms   ARGV[5] the shard count the worker knows
-- ARGV[6] how many tasks the worker holds, by its own count, on every shard
-- ARGV[7], ...: what the worker serves: "<func>\t<signature>" per handle it
-- registered
-- Returns a flat array of quadruples: task id, attempt, payload, and "!" for a
-- task of the private list or "" for the public one; then "shards" and the
-- queue's shard count (1 + the names in the list) if it is above the one
-- the worker knows, so that a worker learns of new shards with its next
-- take; then "suspect" if a suspect was left for when the worker holds nothing,
-- or "drained" if the take left every list empty.
local base, n, wid = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local out = {}
local taken = 0
local alone = false
local suspect = false -- a suspect was left: the worker must hold nothing first
local held = {}
-- Whether the worker holds anything, here or elsewhere: then it may take no
-- suspect.
local holding = tonumber(ARGV[6]) > 0 or redis.call('SCARD', KEYS[2]) > 0

-- Per manager, its key prefix and whether it has lost attempts at all (most
-- have none, which saves a lookup per task).
local managers = {}
local function keys_of(tid)
  local k = manager(base, tid)
  if not k then return nil end
  local m = managers[k]
  if not m then
    m = {tasks = k .. ':tasks', attempts = k .. ':attempts'}
    m.lost = redis.call('EXISTS', m.attempts) == 1
    managers[k] = m
  end
  return m
end

-- The elements each lane key gave (see unlane), to take off its count at
-- the end.
local gave = {}

-- take pops from list until the take has limit tasks.
local function take(list, mark, limit)
  while taken < limit and not alone do
    local ids = redis.call('LPOP', list, limit - taken)
    if not ids then return end
    for i, tid in ipairs(ids) do
      if mark == '' then
        gave[list] = (gave[list] or 0) + size_of(tid)
      end
      local m = keys_of(tid)
      local payload = m and redis.call('HGET', m.tasks, tid)
      if payload then
        local attempt = m.lost and redis.call('HGET', m.attempts, tid) or '0'
        if attempt ~= '0' and (taken > 0 or holding) then
          -- A suspect goes alone, to a worker that holds nothing: put it and
          -- the ids after it back, in order.
          for j = #ids, i, -1 do
            redis.call('LPUSH', list, ids[j])
            if mark == '' then
              gave[list] = gave[list] - size_of(ids[j])
            end
          end
          alone, suspect = true, true
          return
        end
        held[#held + 1] = mark .. tid
        out[#out + 1] = tid
        out[#out + 1] = attempt
        out[#out + 1] = payload
        out[#out + 1] = mark
        taken = taken + 1
        if attempt ~= '0' then
          for j = #ids, i + 1, -1 do
            redis.call('LPUSH', list, ids[j])
            if mark == '' then
              gave[list] = gave[list] - size_of(ids[j])
            end
          end
          alone = true
          return
        end
      end
    end
  end
end
local served = {}
for i = 7, #ARGV do
  served[ARGV[i]] = true
end
-- serves says whether the worker registered what lane's tasks call.
local function serves(lane)
  local mid, l = string.match(lane, '^([^.]+)%.(.+)$')
  local calls = mid and redis.call('HGET', base .. 'm:' .. mid .. ':lanes', l)
  if not calls then
    return false
  end
  local fn, red = string.match(calls, '^([^\n]*)\n?(.*)$')
  return served[fn] == true and (red == '' or served[red] == true)
end

-- round goes round ring once, taking from each lane the worker serves up to
-- share tasks; it reports whether some lane gave its whole share.
local function round(ring, share)
  local full = false
  for _ = 1, redis.call('LLEN', ring) do
    if taken >= n or alone then
      break
    end
    local lane = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
    local list = base .. 'l:' .. lane
    if redis.call('LLEN', list) == 0 then
      redis.call('LREM', ring, -1, lane)
      unlane(list)
    elseif serves(lane) then
      local before = taken
      take(list, '', math.min(n, taken + share))
      full = full or taken - before == share
    end
  end
  return full
end

if redis.call('LPOS', KEYS[4], 'stop') then
  return out
end
if not redis.call('ZSCORE', KEYS[5], wid) then
  redis.call('ZADD', KEYS[5], now() + tonumber(ARGV[4]), wid)
end
-- suspect_first gives a worker that holds nothing the first suspect at the
-- head of a lane it serves, alone, before any other task: a worker that was
-- told a suspect waits empties itself for it, and a take that went round
-- the ring in its order would reach the suspect's lane only after taking
-- from the lanes before it, and be refused it again, for as long as other
-- lanes have tasks (a refusal leaves the lane at the back of its ring).
-- Only managers that lost tasks have suspects: a lane of any other costs
-- one LINDEX and one EXISTS.
local function suspect_first()
  for i = 7, #KEYS do
    for _, lane in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do
      local list = base .. 'l:' .. lane
      local head = redis.call('LINDEX', list, 0)
      local m = head and keys_of(head)
      if m and m.lost and (redis.call('HGET', m.attempts, head) or '0') ~= '0' and serves(lane) then
        take(list, '', n)
        return
      end
    end
  end
end

take(KEYS[1], '!', n)
if taken == 0 and not alone and not holding then
  suspect_first()
end
for i = 7, #KEYS do
  local lanes = redis.call('LLEN', KEYS[i])
  if taken < n and not alone and lanes > 0 and round(KEYS[i], math.ceil((n - taken) / lanes)) then
    round(KEYS[i], n - taken)
  end
end
for i = 1, #held, CHUNK do
  redis.call('SADD', KEYS[2], unpack(held, i, math.min(i + CHUNK - 1, #held)))
end
for list, n in pairs(gave) do
  if redis.call('LLEN', list) == 0 then
    unlane(list)
  elseif n ~= 0 then
    redis.call('INCRBY', list .. ':e', -n)
  end
end
local shards = 1 + redis.call('LLEN', KEYS[6])
if shards > tonumber(ARGV[5]) then
  out[#out + 1] = 'shards'
  out[#out + 1] = shards
end
if suspect then
  out[#out + 1] = 'suspect'
end
if taken < n and not alone then
  redis.call('DEL', KEYS[4])
  redis.call('SADD', KEYS[3], wid)
  out[#out + 1] = 'drained'
else
  redis.call('SREM', KEYS[3], wid)
end
return out
