-- take.lua: take up to n tasks for one worker, from its private list first and
-- then from the lanes of the rings, highest priority first, and record each in
-- the worker's held set in the same atomic step as the pop: a worker killed at
-- any instant loses no task.
-- Each batch queues its public tasks in a lane of its own, and a ring per
-- priority lists the lanes that have tasks. A take goes round the ring of a
-- priority, moving each lane it looks at from the front to the back, and
-- takes from each lane whose function (and reducer) the worker registered
-- with the same signature (ARGV[8], ...) at most its share of what the take
-- still wants (that, divided by the lanes of the ring), then, if the round
-- left room, goes round once more without the share. So the lanes of a
-- priority share the workers, in turns, whatever their sizes; a lane whose
-- function the worker does not serve is passed over, its tasks left for a
-- worker that does; a lane found empty, or emptied by the take, leaves the
-- ring at once. A higher priority is emptied first.
-- A task its manager no longer wants (not in the manager's task set: cancelled,
-- finished, or the manager's keys expired) is dropped and never returned, so
-- it is never run.
-- A task lost SUSPECT times (2; its attempt count) is a suspect: it may be a
-- poison pill that kills its worker, taking along whatever else that worker
-- holds (running, waiting to run, or run and not yet reported). A task lost
-- once is not: a worker that died holding k tasks was killed by one of them
-- at most, or by none (a SIGKILL, the OOM killer, a lost machine), and
-- running all k alone cost a whole worker each, one after another. So a
-- pill runs side by side twice, and each innocent beside it loses an
-- attempt each time; one lost twice (beside it both times) is a suspect
-- too. A suspect is handed out only to a worker that holds nothing: its
-- held set here is empty (which counts tasks of a take whose reply never
-- reached it) and it says it holds nothing on other shards (ARGV[6]); and
-- alone, in a take of its own. The worker then takes nothing more until
-- the suspect's result is reported. So a task dies beside a poison pill on
-- the pill's first two runs at most: it loses two attempts at most, and,
-- with a budget of 3 or more, then runs alone. A worker that holds something
-- leaves the suspect where it is, takes nothing after it, and is told
-- "suspect": it then waits until it holds nothing (reports all it holds,
-- gives back what it was never given) and takes again. A worker that holds
-- nothing looks for a suspect at the head of every lane it serves first, so
-- that it gets one before the lanes ahead of it in the ring fill its take.
-- A worker absent from the workers set (Redis lost it: a restart, FLUSHALL,
-- a failover, since its last heartbeat) is added back, with a deadline of one
-- lease from now, in the same step: else, killed before its next heartbeat,
-- it would hold tasks no reap ever finds.
-- Foreign data (a key of the wrong type, a counter that is not a number)
-- in a key a take reads never fails the take: the key is set aside
-- (set_aside) and the take goes on; a manager's task set holding it wants
-- nothing (its manager fails its batches); the lane counters for operators
-- are never on the take's path (count_elements).
-- A take of a shard an operator paused (keys.Paused) takes nothing; the
-- worker joins the idle set and its flags say "drained" and "paused".
-- A worker that is stopping leaves a "stop" token on its bell (RingStop): a
-- take then takes nothing, as it may run pipelined after the wait that token
-- ended.
-- If the take leaves every list empty (it took fewer than n, and not for a
-- suspect), the worker joins the idle set (and its stale bell tokens are
-- cleared) in this same step, so no submit can slip unseen between "found
-- no more" and "waiting for the bell"; its flags then say "drained",
-- and the worker's next take waits for its bell first.
-- A task of a limited function (keys.Limits; its lane's function, found
-- from its id, private tasks too) is taken only if its limit has room: the
-- worker has room to start it now (ARGV[7]: no limited task waits in a
-- worker's prefetch), fewer of the function's tasks are held than its
-- concurrency cap, and its rate's bucket (GCRA: a theoretical arrival time
-- per function in lim:state) holds its elements (a task of more elements
-- than the burst, once the bucket is full). Else it stays at the head of
-- its list, which the take leaves for the next (a private list waits
-- there), and the reply says when to come back: "wait" and the ms until
-- the first token a refused task needs is due; the worker sleeps on its
-- bell until then. A take refused for want of a slot leaves the worker in
-- the function's waiting set, rung when a slot returns; one refused for
-- want of room to start says "room", and the worker takes again when one
-- of its own tasks ends. Each refusal counts in lim:state ("w\t<func>"),
-- once a take.
-- KEYS[1] private list of the worker   KEYS[2] held set of the worker
-- KEYS[3] idle set   KEYS[4] bell of the worker
-- KEYS[5] workers sorted set (wid -> lease deadline, ms)
-- KEYS[6] the queue's list of shard names (see shards.lua; in shard 0, else
-- a key that never exists)
-- KEYS[7], ...: the rings, highest priority first (up to the last key, the
-- migration guard that scripts.go appends, which is no ring)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] n, at least 1   ARGV[3] worker id
-- ARGV[4] the worker's lease, ms   ARGV[5] the shard count the worker knows
-- ARGV[6] how many tasks the worker holds, by its own count, on every shard
-- ARGV[7] how many tasks of limited functions the worker could start now
-- ARGV[8], ...: what the worker serves: "<func>\t<signature>" per handle it
-- registered
-- Returns a flat array: per task its id and payload ("" if it is over
-- INLINE: the worker reads it from the task set with a plain HMGET, see
-- RDB.Take), followed, only if its attempt is not "0" or its mark not "",
-- by an array {attempt, mark}: the mark is "!" for a task of the private
-- list or "" for the public one, followed by "@<µs>" if its limit held it
-- back that long (lim:since keeps when it first did). Most tasks are a
-- first attempt from a lane: two values each. Last comes an array of
-- flags, always: "shards" and the queue's shard count (1 + the names in
-- the list) if it is above the one the worker knows, so that a worker
-- learns of new shards with its next take; then "suspect" if a suspect was
-- left for when the worker holds nothing, or "drained" if the take left
-- every list empty (or what is left waits on a limit), or "room" if a
-- limited task waits for the worker to have room; then "wait" and ms, if a
-- rate refused a task.
local base, n, wid = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local out = {}
local nout = 0 -- the length of out (a # is a search)
local taken = 0
local alone = false
local suspect = false -- a suspect was left: the worker must hold nothing first
local held = {}
-- Whether the worker holds anything, here or elsewhere: then it may take no
-- suspect.
local holding = tonumber(ARGV[6]) > 0 or guarded('SCARD', KEYS[2]) > 0

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
    -- Its widest payload (keys.Widest), nil if unknown.
    m.widest = tonumber(guarded('GET', k .. ':widest') or '')
    managers[k] = m
  end
  return m
end

-- The elements each lane key gave (see unlane), to take off its count at
-- the end.
local gave = {}

-- Four keys most takes find absent: the queue's limits, its pause, the
-- worker's private list and the shard's backup tasks. One EXISTS answers
-- for all four; each is looked at alone only if one of them exists.
local special = redis.call('EXISTS', base .. 'limits', base .. 'paused', KEYS[1], base .. 'backups') > 0
-- Limits: see the header. Most queues have none.
local limited = special and redis.call('EXISTS', base .. 'limits') == 1
local room = tonumber(ARGV[7]) or 0
local roomless = false -- a limited task waits for the worker to have room
local due = nil -- ms until the first token a refused task needs
local clock = nil
local fns = {} -- lane -> its function's name, or false
local limits = {} -- function -> its limit (parse_limit, with state), or false
local mine = {} -- tasks this take counted against a cap: not yet in the held set
local held_back = {} -- task id -> µs its limit held it back, for its mark
local since_on = limited and redis.call('EXISTS', base .. 'lim:since') == 1

-- The limits' functions, made only for a take of a queue that has limits:
-- a function is made anew at each call of the script, at a few hundred of
-- Redis's instructions for each name it uses from outside itself.
local fn_of, limit_of, running, admit
if limited then
  -- fn_of returns the function task tid calls, from its lane, or nil.
  function fn_of(tid)
    local mid, l = lane_parts(tid)
    if not mid then
      return nil
    end
    local lane = mid .. '.' .. l
    local fn = fns[lane]
    if fn == nil then
      local calls = guarded('HGET', base .. 'm:' .. mid .. ':lanes', l)
      fn = calls and string.match(calls, '^([^\t\n]*)') or false
      fns[lane] = fn
    end
    return fn or nil
  end

  -- limit_of returns the limit in force of function fn, or nil.
  function limit_of(fn)
    local lim = limits[fn]
    if lim == nil then
      lim = parse_limit(guarded('HGET', base .. 'limits', fn)) or false
      if lim then
        lim.key = limit_key(base, fn)
        if lim.rate > 0 then
          lim.T = lim.per / lim.rate -- ms per element
          clock = clock or now()
          -- A crafted arrival time waits a day at most.
          lim.tat = math.min(finite(guarded('HGET', base .. 'lim:state', fn)) or 0, clock + lim.burst * lim.T + 86400000)
        end
      end
      limits[fn] = lim
    end
    return lim or nil
  end

  -- running returns how many tasks hold a slot of lim's cap. Once at the cap
  -- it drops slots whose worker no longer holds their task (a path that ended
  -- a hold without unhold_limited, or writes Redis lost), so the cap cannot
  -- leak.
  function running(lim)
    if lim.n then
      return lim.n
    end
    local run = lim.key .. ':run'
    local n = guarded('HLEN', run)
    if n >= lim.conc then
      local all = redis.call('HGETALL', run)
      for i = 1, #all, 2 do
        local tid, w = all[i], all[i + 1]
        local held = base .. 'w:' .. w .. ':held'
        if not mine[tid] and guarded('SISMEMBER', held, tid) == 0 and redis.call('SISMEMBER', held, '!' .. tid) == 0 then
          redis.call('HDEL', run, tid)
          guarded('HDEL', base .. 'lim:held', tid)
          n = n - 1
        end
      end
    end
    lim.n = n
    return n
  end

  -- admit says whether task tid may be taken now, by its function's limit,
  -- and if so counts it there.
  function admit(tid)
    local fn = fn_of(tid)
    local lim = fn and limit_of(fn)
    if not lim then
      return true
    end
    local ok = true
    if room <= 0 then
      roomless, ok = true, false
    elseif lim.conc > 0 and running(lim) >= lim.conc then
      guarded('SADD', lim.key .. ':wait', wid)
      redis.call('PEXPIRE', lim.key .. ':wait', BELL_TTL)
      ok = false
    elseif lim.rate > 0 then
      local size = math.max(size_of(tid), 1)
      local tat = math.max(lim.tat, clock)
      local over = tat - clock
      if size <= lim.burst then
        over = over - (lim.burst - size) * lim.T
      end
      if over > 0 then
        due = math.min(due or over, over)
        ok = false
      else
        lim.tat, lim.dirty = tat + size * lim.T, true
      end
    end
    if not ok then
      -- When the limit first held it back, for its trace (see the mark).
      if guarded('HSETNX', base .. 'lim:since', tid, micros()) == 1 then
        redis.call('PEXPIRE', base .. 'lim:since', 86400000)
      end
      if not lim.counted then
        guarded('HINCRBY', base .. 'lim:state', 'w\t' .. fn, 1)
        lim.counted = true
      end
      return false
    end
    room = room - 1
    if lim.conc > 0 then
      guarded('HSET', lim.key .. ':run', tid, wid)
      guarded('HSET', base .. 'lim:held', tid, fn)
      lim.n = lim.n + 1
      mine[tid] = true
    end
    return true
  end
end

-- put_back pushes ids[from..] back at the front of list, in order, and
-- takes what they count off what a lane gave.
local function put_back(list, mark, ids, from)
  for j = #ids, from, -1 do
    redis.call('LPUSH', list, ids[j])
    if mark == '' then
      gave[list] = gave[list] - size_of(ids[j])
    end
  end
end

-- from_tasks runs cmd on manager m's task set; a set holding foreign data
-- answers nil and wants nothing: its manager's check, which reads the set,
-- fails its batches naming the key, and the take goes on with the others.
local function from_tasks(m, cmd, ...)
  return unless_foreign(cmd, m.tasks, ...)
end

-- payloads_of returns the payloads of the ids popped, by index: one over
-- INLINE as "" (the worker reads it with a plain HMGET), none for a task no
-- longer wanted (not in its manager's task set); and each id's manager
-- (keys_of), so that the id is parsed once. The ids of a manager whose
-- widest payload is known to be at most INLINE are read with one HMGET;
-- any other's are checked one by one first (HSTRLEN), so that a large
-- payload is never copied into Lua.
local function payloads_of(ids)
  local got, ms, groups, order = {}, {}, {}, {}
  for i = 1, #ids do -- not ipairs: an iterator is a call per task
    local tid = ids[i]
    local m = keys_of(tid)
    ms[i] = m
    if m and m.widest and m.widest <= INLINE then
      local g = groups[m]
      if not g then
        g = {at = {}, tids = {}, n = 0}
        groups[m] = g
        order[#order + 1] = m
      end
      local k = g.n + 1
      g.n, g.at[k], g.tids[k] = k, i, tid
    elseif m then
      local size = from_tasks(m, 'HSTRLEN', tid) or 0
      if size > 0 then
        got[i] = size <= INLINE and from_tasks(m, 'HGET', tid) or ''
      end
    end
  end
  for _, m in ipairs(order) do
    local g = groups[m]
    for j = 1, #g.tids, CHUNK do
      local vals = from_tasks(m, 'HMGET', unpack(g.tids, j, math.min(j + CHUNK - 1, #g.tids))) or {}
      for k = 1, #vals do
        local v = vals[k]
        if v and v ~= '' then
          got[g.at[j + k - 1]] = v
        end
      end
    end
  end
  return got, ms
end

-- take pops from list until the take has limit tasks. It returns true if
-- it found list empty, or emptied it and put nothing back.
local function take(list, mark, limit)
  while taken < limit and not alone do
    local want = limit - taken
    if limited then
      -- A limited head is popped alone: a refusal then pushes back one id,
      -- not the whole pop.
      local head = guarded('LINDEX', list, 0)
      if not head then return true end
      local fn = fn_of(head)
      if fn and limit_of(fn) then
        want = 1
      end
    end
    local ids = guarded('LPOP', list, want)
    if not ids then return true end
    -- Fewer than asked for: the list is empty now, no need to pop again.
    local last = #ids < want
    local payloads, ms = payloads_of(ids)
    for i = 1, #ids do -- not ipairs: an iterator is a call per task
      local tid = ids[i]
      if mark == '' then
        gave[list] = (gave[list] or 0) + size_of(tid)
      end
      local m = ms[i]
      local payload = payloads[i]
      if payload then
        local attempt = m.lost and guarded('HGET', m.attempts, tid) or '0'
        local is_suspect = suspect_at(attempt)
        if is_suspect and (taken > 0 or holding) then
          -- A suspect goes alone, to a worker that holds nothing: put it and
          -- the ids after it back, in order.
          put_back(list, mark, ids, i)
          alone, suspect = true, true
          return
        end
        if limited and not admit(tid) then
          -- Its limit has no room: it and the ids after it go back, in
          -- order, and the take goes on with the next list.
          put_back(list, mark, ids, i)
          return
        end
        if since_on then
          local since = finite(guarded('HGET', base .. 'lim:since', tid))
          if since then
            redis.call('HDEL', base .. 'lim:since', tid)
            held_back[tid] = math.max(1, micros() - since)
          end
        end
        -- taken counts the tasks in held and out: a length (#) is a search.
        held[taken + 1] = mark == '' and tid or mark .. tid
        out[nout + 1] = tid
        out[nout + 2] = payload
        nout = nout + 2
        local tag = since_on and held_back[tid] and mark .. '@' .. math.floor(held_back[tid]) or mark
        if attempt ~= '0' or tag ~= '' then
          nout = nout + 1
          out[nout] = {attempt, tag}
        end
        taken = taken + 1
        if is_suspect then
          put_back(list, mark, ids, i + 1)
          alone = true
          return
        end
      end
    end
    if last then
      return true
    end
  end
  return false
end
local served = {}
for i = 8, #ARGV do
  served[ARGV[i]] = true
end
-- serves says whether the worker registered what lane's tasks call.
local function serves(lane)
  local mid, l = string.match(lane, '^([^.]+)%.(.+)$')
  local calls = mid and guarded('HGET', base .. 'm:' .. mid .. ':lanes', l)
  if not calls then
    return false
  end
  -- each line a handle: the function, a reducer, a pipeline's steps
  for handle in string.gmatch(calls, '[^\n]+') do
    if not served[handle] then
      return false
    end
  end
  return true
end

-- take_backups takes from the shard's backup tasks (keys.Backups: copies
-- of tasks that ran long near their batch's end, each with the worker that
-- holds the original), before any lane: a copy is there for a batch's
-- end. It passes a copy of a task the worker holds (a copy beside the
-- original on the same worker gains nothing) or of a function it does not
-- serve, leaving it for another worker; drops one whose task ended (no
-- longer in its task set), was lost before (a suspect, or one beside a
-- lost worker, is never copied: it may be a poison pill) or is of a limited
-- function (a copy would spend the limit's budget twice). A copy goes out
-- marked "+" and is held as its task is: the first result wins at the
-- finish, which the task set fences.
local function take_backups()
  local key = base .. 'backups'
  local entries = guarded('LRANGE', key, 0, BACKUPS_MAX - 1)
  if #entries == 0 then
    return
  end
  local keep, changed = {}, false
  for i = 1, #entries do
    local tid, holder = string.match(entries[i], '^([^\t]+)\t(.*)$')
    local mid, l
    if tid then
      mid, l = lane_parts(tid)
    end
    local m = mid and keys_of(tid)
    if not m then
      changed = true
    elseif taken >= n or alone or holder == wid or not serves(mid .. '.' .. l)
        or guarded('SISMEMBER', KEYS[2], tid) == 1 then
      keep[#keep + 1] = entries[i]
    else
      changed = true
      local payload = payloads_of({tid})[1]
      local attempt = m.lost and guarded('HGET', m.attempts, tid) or '0'
      local fn = limited and fn_of(tid)
      if payload and attempt == '0' and not (fn and limit_of(fn)) then
        held[taken + 1] = tid
        out[nout + 1] = tid
        out[nout + 2] = payload
        out[nout + 3] = {'0', '+'}
        nout = nout + 3
        taken = taken + 1
      end
    end
  end
  if changed then
    redis.call('DEL', key)
    for j = 1, #keep, CHUNK do
      redis.call('RPUSH', key, unpack(keep, j, math.min(j + CHUNK - 1, #keep)))
    end
    if #keep > 0 then
      redis.call('PEXPIRE', key, BACKUPS_TTL)
    end
  end
end

-- The lanes this take found empty, or emptied: they left their ring (a
-- submit or a requeue puts a lane back), and the keys beside them went.
local emptied = {}
-- The ring and name of each lane a round took from, by its list: one left
-- empty leaves its ring at the end.
local rounds = {}

-- drop takes lane (list: its list), found empty, out of ring.
local function drop(ring, lane, list)
  guarded('LREM', ring, '-1', lane)
  unlane(list)
  emptied[list] = true
end

-- round goes round ring once (lanes: its length, if known), taking from each
-- lane the worker serves up to share tasks; it reports whether some lane gave
-- its whole share. A lane found empty, or emptied, leaves the ring at once,
-- so the next take does not walk it.
local function round(ring, share, lanes)
  local full = false
  for _ = 1, lanes or guarded('LLEN', ring) do
    if taken >= n or alone then
      break
    end
    local lane = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
    local list = base .. 'l:' .. lane
    if serves(lane) then
      local before = taken
      if take(list, '', math.min(n, taken + share)) then
        drop(ring, lane, list)
      else
        rounds[list] = {ring, lane}
      end
      full = full or taken - before == share
    elseif guarded('LLEN', list) == 0 then
      drop(ring, lane, list)
    end
  end
  return full
end

if guarded('LPOS', KEYS[4], 'stop') then
  return {{}}
end
if not guarded('ZSCORE', KEYS[5], wid) then
  redis.call('ZADD', KEYS[5], now() + tonumber(ARGV[4]), wid)
end
-- An operator paused the queue (redmap pause): nothing is taken, and the
-- worker waits on its bell, idle, until a resume rings it.
if special and redis.call('EXISTS', base .. 'paused') == 1 then
  redis.call('DEL', KEYS[4])
  guarded('SADD', KEYS[3], wid)
  return {{'drained', 'paused'}}
end
if special then
  take(KEYS[1], '!', n)
  if taken < n and not alone and redis.call('EXISTS', base .. 'backups') == 1 then
    take_backups()
  end
end
-- The rings that have lanes (an empty list does not exist): one EXISTS
-- spares a look at each ring below the last of them, or at all.
local rings = #KEYS > 7 and redis.call('EXISTS', unpack(KEYS, 7, #KEYS - 1)) or 0
if taken == 0 and not alone and not holding and rings > 0 then
  -- suspect_first gives a worker that holds nothing the first suspect at the
  -- head of a lane it serves, alone, before any other task: a worker that was
  -- told a suspect waits empties itself for it, and a take that went round
  -- the ring in its order would reach the suspect's lane only after taking
  -- from the lanes before it, and be refused it again, for as long as other
  -- lanes have tasks (a refusal leaves the lane at the back of its ring).
  -- Only managers that lost tasks have suspects: a lane of any other costs
  -- one LINDEX and one EXISTS.
  local function suspect_first()
    for i = 7, #KEYS - 1 do
      for _, lane in ipairs(guarded('LRANGE', KEYS[i], 0, -1)) do
        local list = base .. 'l:' .. lane
        local head = guarded('LINDEX', list, 0)
        local m = head and keys_of(head)
        if m and m.lost and suspect_at(guarded('HGET', m.attempts, head)) and serves(lane) then
          take(list, '', n)
          return
        end
      end
    end
  end
  suspect_first()
end
for i = 7, #KEYS - 1 do
  if taken >= n or alone or rings == 0 then
    break
  end
  local lanes = guarded('LLEN', KEYS[i])
  if lanes > 0 then
    rings = rings - 1
    -- A second round, without the share, only if the first left room
    -- (its LLEN of the ring is a command).
    if round(KEYS[i], math.ceil((n - taken) / lanes), lanes) and taken < n and not alone then
      round(KEYS[i], n - taken)
    end
  end
end
for i = 1, #held, CHUNK do
  guarded('SADD', KEYS[2], unpack(held, i, math.min(i + CHUNK - 1, #held)))
end
for list, n in pairs(gave) do
  if emptied[list] then -- its keys went with it
  elseif guarded('LLEN', list) == 0 then
    local r = rounds[list]
    if r then
      drop(r[1], r[2], list)
    else
      unlane(list)
    end
  elseif n ~= 0 then
    count_elements(list, -n)
  end
end
for fn, lim in pairs(limits) do
  if lim and lim.dirty then
    guarded('HSET', base .. 'lim:state', fn, string.format('%.3f', lim.tat))
  end
end
local flags = {}
local shards = 1 + guarded('LLEN', KEYS[6])
if shards > tonumber(ARGV[5]) then
  flags[#flags + 1] = 'shards'
  flags[#flags + 1] = shards
end
if suspect then
  flags[#flags + 1] = 'suspect'
end
if taken < n and not alone and roomless then
  -- The worker takes again when one of its tasks ends, bell or not.
  guarded('SREM', KEYS[3], wid)
  flags[#flags + 1] = 'room'
elseif taken < n and not alone then
  redis.call('DEL', KEYS[4])
  guarded('SADD', KEYS[3], wid)
  flags[#flags + 1] = 'drained'
else
  guarded('SREM', KEYS[3], wid)
end
if due and taken < n and not alone then
  flags[#flags + 1] = 'wait'
  flags[#flags + 1] = math.max(1, math.ceil(due))
end
out[nout + 1] = flags
return out
