-- finish.lua: deliver the results of tasks that are still wanted; drop the rest.
-- A result is delivered only if its task is still in its manager's task set,
-- and delivering removes it from the set, so the first result of a task is
-- delivered and every later one (a duplicate, a zombie's, a cancelled task's)
-- is discarded: a manager never sees a stale or duplicate result.
-- Results are pushed before their tasks leave the set, so a write refused
-- half-way (Redis out of memory) leaves the tasks outstanding, not lost. Work
-- is grouped by manager: one check of its tasks (an HMGET of them all if its
-- payloads are known to be at most NARROW bytes, keys.Widest; else an
-- HEXISTS per task), then one push and one delete per manager; a task
-- finished twice in one call is delivered once.
-- Each task reported returns its slot to its function's concurrency cap,
-- if it holds one (unhold_limited).
-- An empty result only releases the hold: the worker skipped the task as no
-- longer wanted. It must not be delivered even if the task is wanted again by
-- now (its manager submitted it again after Redis lost it), or the manager
-- would lose the task to an unreadable result.
-- A result over INLINE bytes does not pass through Lua: the worker stores it
-- in its manager's staged results (keys.Staged) with a plain HSET in this
-- call's MULTI, and passes "=<field>" in its place; a delivered one is
-- referred to from the result list ("staged <field>", read by the manager
-- with the entry), one not delivered is deleted here. The fence is the
-- same: only this script decides, from the task set, whether a result is
-- delivered, and a field names one worker's one finish of one task.
-- The task of a batch that is one task (a lone Map) may come with the
-- batch's history record, completed by the worker from its result: it is
-- written (record_solos) if and only if the result is delivered, in the same
-- step, so the record is in Redis by the time the manager reads the result,
-- and the manager need not write it before Map returns. The records are
-- written after the results are pushed.
-- KEYS[1] held set of the worker
-- ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2] what the pairs may hold besides tasks and their results: "#" if
-- history records, "=" if staged results, both, or "" (most calls): a
-- pair is looked at for them only if it says so
-- ARGV[3], ARGV[4], ...: task id, encoded result (or "" for a task skipped
-- unrun, or "=<field>" for a staged one), task id, encoded result, ...;
-- a pair may follow a task's: "#<bounds>" (see record_solos), the history
-- record of the task's batch.
-- A key holding foreign data is set aside (set_aside), but a task set:
-- its results are not delivered (in_set), and its manager fails its tasks.
-- Returns the number of results delivered.
local base = ARGV[1]
local FIRST = 3 -- the first pair's index
local with_records = string.find(ARGV[2], '#', 1, true) ~= nil
local with_staged = string.find(ARGV[2], '=', 1, true) ~= nil
local delivered = 0
local members = {}
local seen = {}
local groups = {} -- manager key prefix -> {m = it, tasks = task set, at, tids, results}
local order = {}
local solos = {} -- manager key prefix, bounds, record, ...: records to write
local records = false -- some pair is a history record ("#<bounds>")
local nm = 0 -- the length of members (a # is a search)
local byte = string.byte -- a local: it runs for every task
-- Each task reported with a result, by its manager, to be checked.
for i = FIRST, #ARGV, 2 do
  local tid = ARGV[i]
  if with_records and byte(tid, 1) == 35 then -- '#': a history record, not a task
    records = true
  else
    nm = nm + 1
    members[nm] = tid
    local m = manager(base, tid)
    if m and ARGV[i + 1] ~= '' then
      local g = groups[m]
      if not g then
        g = {m = m, tasks = m .. ':tasks', at = {}, n = 0, tids = {}, results = {}, d = 0}
        groups[m] = g
        order[#order + 1] = m
      end
      g.n = g.n + 1
      g.at[g.n] = i
    end
  end
end
-- in_set returns which of the tasks at ARGV indexes at are in task set
-- tasks: one HMGET if the manager's payloads are known to be small
-- (keys.Widest: the copy costs less than a check per task), else an
-- HEXISTS each. A task set (or its widest) holding foreign data wants
-- nothing: none of its results is delivered, and the call goes on with
-- the other managers' (its manager's check fails its batches naming the
-- key).
local function in_set(m, tasks, at)
  local found = {}
  local w = redis.pcall('GET', m .. ':widest')
  local widest = type(w) == 'string' and tonumber(w) or nil
  if widest and widest <= NARROW then
    for j = 1, #at, CHUNK do
      local tids = {}
      for k = j, math.min(j + CHUNK - 1, #at) do
        tids[k - j + 1] = ARGV[at[k]]
      end
      local vals = unless_foreign('HMGET', tasks, unpack(tids))
      if vals == nil then
        return {}
      end
      for k = 1, #vals do
        found[j + k - 1] = vals[k] ~= false
      end
    end
  else
    for k = 1, #at do
      local i = at[k]
      local r = unless_foreign('HEXISTS', tasks, ARGV[i])
      if r == nil then
        return {}
      end
      found[k] = r == 1
    end
  end
  return found
end
local ok = {} -- ARGV index of a task -> true if its result is delivered (kept only for the records)
for _, m in ipairs(order) do
  local g = groups[m]
  local found = in_set(m, g.tasks, g.at)
  for k = 1, g.n do -- not ipairs: an iterator is a call per task
    local i = g.at[k]
    local tid, r = ARGV[i], ARGV[i + 1]
    local staged = with_staged and byte(r, 1) == 61 -- '='
    if found[k] and not seen[tid] then
      seen[tid] = true
      if records then
        ok[i] = true
      end
      local d = g.d + 1 -- results delivered so far (a # is a search)
      g.d, g.tids[d] = d, tid
      if staged then
        r = 'staged ' .. string.sub(r, 2)
        g.staged = true
      end
      g.results[d] = r
    elseif staged then
      -- Not wanted, or a duplicate in this call: its staged result goes.
      guarded('HDEL', m .. ':staged', string.sub(r, 2))
    end
  end
end
for i = FIRST + 2, records and #ARGV or 0, 2 do
  if byte(ARGV[i], 1) == 35 and ok[i - 2] then -- the record of a task delivered
    solos[#solos + 1] = manager(base, ARGV[i - 2])
    solos[#solos + 1] = ARGV[i]
    solos[#solos + 1] = ARGV[i + 1]
  end
end
-- A task is held as its id, or "!<id>" if it came from the worker's
-- private list. Most come from lanes: the "!" forms are looked for only if
-- the ids did not all go (some were private, not held, or repeated).
local removed = 0
for i = 1, nm, CHUNK do
  removed = removed + guarded('SREM', KEYS[1], unpack(members, i, math.min(i + CHUNK - 1, nm)))
end
if removed < nm then
  local bang = {}
  for i = 1, nm do
    bang[i] = '!' .. members[i]
  end
  for i = 1, nm, CHUNK do
    redis.call('SREM', KEYS[1], unpack(bang, i, math.min(i + CHUNK - 1, nm)))
  end
end
if redis.call('EXISTS', base .. 'lim:held') == 1 then
  for i = FIRST, #ARGV, 2 do
    if not (with_records and byte(ARGV[i], 1) == 35) then
      unhold_limited(base, ARGV[i])
    end
  end
end
for _, m in ipairs(order) do
  local g = groups[m]
  if #g.tids > 0 then
    for i = 1, #g.results, CHUNK do
      guarded('RPUSH', m .. ':results', unpack(g.results, i, math.min(i + CHUNK - 1, #g.results)))
    end
    -- Most managers have lost no attempts: one EXISTS spares the copy of
    -- every id into a delete that finds nothing.
    local attempts = redis.call('EXISTS', m .. ':attempts') == 1
    for i = 1, #g.tids, CHUNK do
      local j = math.min(i + CHUNK - 1, #g.tids)
      redis.call('HDEL', g.tasks, unpack(g.tids, i, j))
      if attempts then
        guarded('HDEL', m .. ':attempts', unpack(g.tids, i, j))
      end
    end
    delivered = delivered + #g.tids
    -- A result list lives as long as its manager's task set, which the
    -- manager renews while it lives. (A manager waiting for results
    -- blocks on the list itself: the push wakes it.)
    local ttl = redis.call('PTTL', g.tasks)
    if ttl > 0 then
      redis.call('PEXPIRE', m .. ':results', ttl)
      if g.staged then
        redis.call('PEXPIRE', m .. ':staged', ttl)
      end
    end
  end
end
if #solos > 0 then
  record_solos(base, solos, now())
end
return delivered
