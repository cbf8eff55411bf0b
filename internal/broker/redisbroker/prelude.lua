-- prelude.lua: what the scripts share. scripts.go puts what each script
-- names of it in front of the script as it embeds it (preludeFor), so that
-- each script reads as its own logic only. It defines names and calls
-- nothing: each a top-level "local NAME = ..." line, or a "local function
-- NAME(...)" ending at a line "end", naming only those above it. Every script's last key in KEYS is its
-- migration guard (scripts.go): a key that never exists, which no script
-- reads or writes.

-- How long a bell's token lives, ms. A sleeper that misses one wakes at the
-- end of its own wait anyway; the token only has to outlive that wait. A
-- string: a Lua number passed to a command is formatted with snprintf
-- ("%.17g"), some 2,000 instructions of Redis's (7.0) a number, and the
-- scripts pass a few dozen a lone Map; a literal or an argument passes as
-- it came.
local BELL_TTL = '60000'
-- Most values one command gets at once: unpack puts them all on Lua's stack,
-- which holds a few thousand at most.
local CHUNK = 500
-- Most units of work one call of a script that works in slices does
-- (redisbroker.ScriptBudget): a batch recorded or published, a lane or a task
-- withdrawn, a task purged or reaped, each a few commands. Its caller calls again
-- until the script says it is done: no call holds Redis for long, however
-- many batches or tasks there are, and each call leaves a consistent state.
local BUDGET = 500
-- The largest payload a take returns, or result a finish takes, through
-- the script: larger ones go out and in with plain commands beside it (in
-- the same MULTI, or the next round trip), as copying a string into Lua and
-- out again costs Redis about 1 ns a byte, and a plain command a µs or two
-- whatever its size. redisbroker.Inline says the same (TestInlineAgrees).
local INLINE = 2048
-- How many times a task must have been lost (its worker died, or stalled
-- past its lease, or stopped with it running) to be a suspect: handed only
-- to a worker that holds nothing, and alone (see take.lua). A task lost
-- once was most likely lost beside whatever killed its worker: it runs
-- side by side again. wire.SuspectAfter says the same (TestSuspectAgrees).
local SUSPECT = 2
-- suspect says whether a task of lost-attempt count attempt (a string, as
-- HGET gives it, or nil) is a suspect.
local function suspect_at(attempt)
  return (tonumber(attempt) or 0) >= SUSPECT
end
-- Most entries of a shard's backup tasks (keys.Backups, keys.BackupsMax):
-- what a take reads of them a call.
local BACKUPS_MAX = 64
-- How long a shard's backup tasks live past their last write, ms: a copy
-- is for a batch's end, which no take reaching it within minutes missed.
local BACKUPS_TTL = '600000'
-- The prefix of a task's mark, in its manager's attempt counts, that it got
-- a backup task ("+<task id>" -> 1; backup.lua): it outlives the task's end
-- by a result, so that the call that lost the race learns it was outrun
-- (unwanted.lua), and goes with a cancel of the task (cancel.go,
-- retract.lua, fail), so that a cancelled call never is.
local COPIED = '+'
-- The widest payload a finish copies into Lua to check at once that tasks
-- are still wanted (one HMGET), rather than an HEXISTS per task: below it
-- the copy costs Redis less than the calls.
local NARROW = 512

-- now returns the time on the Redis clock, ms: deadlines compared there do not
-- depend on the clocks of the machines that wrote them.
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- micros returns the time on the Redis clock, µs.
local function micros()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- string.find, string.sub and string.match, held in locals: the parsers of
-- task ids below run for every task a script moves, and a global's lookup
-- costs two table reads a call.
local str_find = string.find
local str_sub = string.sub
local str_match = string.match

-- The last manager that manager() found: {base, "<manager id>-", its key
-- prefix}. The tasks of one call are mostly one manager's, and a plain find
-- of the id's head costs Lua a fraction of a pattern match and two new
-- strings a task.
local last_manager = {}

-- manager returns the key prefix ("<base>m:<manager id>") of the manager that
-- submitted task tid ("<manager id>-<n>"), or nil if tid is malformed.
local function manager(base, tid)
  local last = last_manager
  if last[1] == base and str_find(tid, last[2], 1, true) == 1 then
    return last[3]
  end
  local i = str_find(tid, '-', 1, true)
  if not i or i == 1 then
    return nil
  end
  local key = base .. 'm:' .. str_sub(tid, 1, i - 1)
  last[1], last[2], last[3] = base, str_sub(tid, 1, i), key
  return key
end

-- set_aside deletes key, found holding data redmap did not write there (a
-- wrong type, a counter that is not a number: err is Redis's reply), and
-- says so in Redis's log: foreign data in one of a queue's keys must not
-- stop the queue. What the key held for redmap is rebuilt from the task
-- sets, the truth (audit.lua puts back each outstanding task found in no
-- list and no held set, its lane in its ring, its lane's entry).
local function set_aside(key, err)
  redis.log(redis.LOG_WARNING, 'redmap: deleted ' .. key .. ', which held foreign data: ' .. tostring(err))
  redis.call('DEL', key)
end

-- foreign says whether pcall's reply r is an error that the data in the key
-- caused (not a refusal, an out-of-memory, ...).
local function foreign(r)
  if type(r) ~= 'table' or not r.err then
    return false
  end
  local e = r.err
  return str_find(e, 'WRONGTYPE', 1, true) == 1 or str_find(e, 'not an integer', 1, true) ~= nil or str_find(e, 'not a valid float', 1, true) ~= nil
end

-- fence_read returns a durable batch's fence (keys.Fence: the JSON record
-- of the last claim taken), or nil if there is none. A fence that is not a
-- claim's record (foreign data: another type, a value that does not decode)
-- is set aside: a fence lost refuses nothing, and its holder's keeper sets
-- it again, so a foreign write cannot stop the batch's holder for ever.
local function fence_read(key)
  local r = redis.pcall('GET', key)
  if type(r) == 'table' and r.err then
    if not foreign(r) then
      error(r)
    end
    set_aside(key, r.err)
    return nil
  end
  if not r then
    return nil
  end
  local ok, h = pcall(cjson.decode, r)
  if not ok or type(h) ~= 'table' then
    set_aside(key, 'not a claim')
    return nil
  end
  return r
end

-- fence_check returns the fence (see fence_read) that refuses a write of a
-- durable batch's owner holding claim, or nil if the write may go on: no
-- fence, or claim itself. Another claim's fence refuses it unless that
-- claim is older (a lower token: each claim taken numbers itself one more
-- than the fence it found): then Redis lost this claim's takeover (a
-- failover that dropped the old primary's last writes, a restart from an
-- older snapshot), and the fence is set back to claim, its TTL kept, so
-- that the older claim's holder is refused from now on. Without it the
-- batch's holder stopped, told that a manager long gone had taken the
-- batch over (make chaos).
local function fence_check(key, claim)
  local fence = fence_read(key)
  if not fence or fence == claim then
    return nil
  end
  local mine = tonumber(string.match(claim, '"token":(%d+)}$'))
  local theirs = tonumber(string.match(fence, '"token":(%d+)}$'))
  if mine and theirs and mine > theirs then
    redis.call('SET', key, claim, 'KEEPTTL')
    return nil
  end
  return fence
end

-- unless_foreign runs command cmd on key (its first key) with the rest of
-- its arguments and returns the reply, or nil if the key holds foreign
-- data (left as it is: a task set, whose manager's check fails its batches
-- naming the key). Any other error is raised as it came.
local function unless_foreign(cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if not foreign(r) then
      error(r)
    end
    return nil
  end
  return r
end

-- guarded runs command cmd on key (its first key) with the rest of its
-- arguments, and returns the reply; if key held foreign data it is set
-- aside and the command runs again on the key, now absent. Any other error
-- is raised as it came.
local function guarded(cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if not foreign(r) then
      error(r)
    end
    set_aside(key, r.err)
    return redis.call(cmd, key, ...)
  end
  return r
end

-- wanted says whether task tid's manager still wants it: it is in the
-- manager's task set (not finished, cancelled, purged, or expired with it).
-- A task set holding foreign data wants nothing: its manager, whose check
-- reads the set, fails its batches naming the key.
local function wanted(base, tid)
  local m = manager(base, tid)
  if m == nil then
    return false
  end
  return unless_foreign('HEXISTS', m .. ':tasks', tid) == 1
end

-- lane_parts returns the manager id and the lane number in task id tid
-- ("<manager id>-<seq>,<n>.<lane>[~<p>]"), or nil.
local function lane_parts(tid)
  return string.match(tid, '^([^-]+)-[^.~]+%.([^~]+)')
end

-- lane_of returns the lane of task tid ("<manager id>.<lane>", from an id
-- "<manager id>-<seq>.<lane>[~<p>]": see id.TaskIn) and the ring of its
-- priority ("<base>ring", or "<base>ring:<p>": see keys.Ring); nil for a
-- task of no lane.
local function lane_of(base, tid)
  local mid, lane = lane_parts(tid)
  if not mid then
    return nil
  end
  local p = string.match(tid, '~(%d+)$')
  return mid .. '.' .. lane, p and base .. 'ring:' .. p or base .. 'ring'
end

-- enlist puts lane back in ring, at its end, unless it is there.
local function enlist(ring, lane)
  if not guarded('LPOS', ring, lane) then
    redis.call('RPUSH', ring, lane)
  end
end

-- size_of returns the elements of task tid (from an id
-- "<manager id>-<seq>,<n>.<lane>[~<p>]": see id.TaskIn), or 0 for an id
-- that does not say (a private task's).
local function size_of(tid)
  -- '^[^-]+-[^,.~]+,(%w+)%.' in two steps: a plain find of the first '-',
  -- then the rest anchored there. The whole pattern, anchored at the id's
  -- start, walked the manager id's 32 characters through a character class
  -- for every task moved.
  local d = str_find(tid, '-', 1, true)
  local n = d and d > 1 and str_match(tid, '^[^,.~]+,(%w+)%.', d + 1)
  return n and tonumber(n, 36) or 0
end

-- seq_of returns the sequence number of task tid, or nil.
local function seq_of(tid)
  local s = string.match(tid, '^[^-]+-(%w+)')
  return s and tonumber(s, 36)
end

-- A lane (list "<base>l:<lane>") has two keys beside it, for operators
-- (backlog.lua): "<lane key>:e", the elements of the tasks in it (a
-- counter every script that moves a task in or out keeps), and
-- "<lane key>:t", when its tasks were submitted (a sorted set, score the
-- first sequence number of each submit, member "<seq>:<Redis ms>"). Both
-- live as long as the lane, and go when it empties.

-- unlane forgets the keys beside lane key list, when it is found empty.
local function unlane(list)
  redis.call('DEL', list .. ':e', list .. ':t')
end

-- count_elements adds n to the elements counted beside lane key list. A
-- counter holding foreign data is set aside, not counted again from n: it
-- is for operators only, and a take never fails for it.
local function count_elements(list, n)
  local r = redis.pcall('INCRBY', list .. ':e', n)
  if type(r) == 'table' and r.err then
    if not foreign(r) then
      error(r)
    end
    set_aside(list .. ':e', r.err)
  end
end

-- requeue puts task tid back at the front of its lane, and the lane in its
-- ring if it had left it (a take drops a lane it finds empty).
local function requeue(base, tid)
  local lane, ring = lane_of(base, tid)
  if lane then
    local list = base .. 'l:' .. lane
    guarded('LPUSH', list, tid)
    count_elements(list, size_of(tid))
    redis.call('PEXPIRE', list .. ':e', math.max(redis.call('PTTL', list), 1000))
    enlist(ring, lane)
  end
end

-- ring wakes a worker that blocks on bell (a list, BLPOP): it leaves one
-- token there, unless one already waits.
local function ring(bell)
  if guarded('LLEN', bell) == 0 then
    redis.call('RPUSH', bell, '1')
    redis.call('PEXPIRE', bell, BELL_TTL)
  end
end

-- ring_worker wakes worker wid of the queue at base.
local function ring_worker(base, wid)
  ring(base .. 'w:' .. wid .. ':bell')
end

-- The result-list entries that stand for a task's result without being one;
-- wire.DecodeEntry (internal/broker/wire) decodes them.
local function lost_entry(tid, wid)
  return 'lost ' .. tid .. ' ' .. wid
end
local function purged_entry(tid)
  return 'purged ' .. tid
end

-- fail ends task tid of manager m (a key prefix) with entry in place of a
-- result: it pushes the entry (which wakes the manager, blocked on the
-- list) and forgets the task. The result list lives as long as the task set.
-- A task set holding foreign data is left to its manager (unless_foreign),
-- the other keys set aside.
local function fail(m, tid, entry)
  guarded('RPUSH', m .. ':results', entry)
  redis.call('PEXPIRE', m .. ':results', math.max(redis.call('PTTL', m .. ':tasks'), 1000))
  unless_foreign('HDEL', m .. ':tasks', tid)
  guarded('HDEL', m .. ':attempts', tid, COPIED .. tid)
end

-- expire_object makes a cached object (metadata key meta, parts parts) live
-- until at, ms on the Redis clock.
local function expire_object(meta, holders, parts, at)
  redis.call('PEXPIREAT', meta, at)
  redis.call('PEXPIREAT', holders, at)
  for i = 0, parts - 1 do
    redis.call('PEXPIREAT', meta .. ':p:' .. i, at)
  end
end


-- trim_history keeps the queue's history (hash hist, ordered by the sorted
-- set index, and each batch's failed elements) to its last limit batches (give or take 1%: the excess is
-- trimmed at once when it reaches it), none older than age ms, and makes
-- both keys live age ms past the last record. t is the time now (Redis
-- ms), if the caller has it. age may be the string it was read as. It
-- trims at most 2 * BUDGET records a call: every writer writes at most
-- BUDGET a call, so a history past its bounds shrinks at every write.
local function trim_history(hist, index, limit, age, t)
  local most = 2 * BUDGET
  local old = guarded('ZRANGEBYSCORE', index, '-inf', (t or now()) - age, 'LIMIT', '0', most)
  local over = redis.call('ZCARD', index) - #old - limit
  if over > 0 and over < math.ceil(limit / 100) and #old == 0 then
    -- a few over: trimmed together once 1% over, not one at every write
    over = 0
  end
  if over > 0 and #old < most then
    local more = redis.call('ZRANGE', index, #old, #old + math.min(over, most - #old) - 1)
    for _, id in ipairs(more) do
      old[#old + 1] = id
    end
  end
  -- Each batch's failed elements (keys.FailedElements, beside hist) go
  -- with its record.
  local failed = string.sub(hist, 1, -8) .. 'failed:' -- "<base>history"
  for i = 1, #old, CHUNK do
    local j = math.min(i + CHUNK - 1, #old)
    guarded('HDEL', hist, unpack(old, i, j))
    redis.call('ZREM', index, unpack(old, i, j))
    for k = i, j do
      redis.call('UNLINK', failed .. old[k])
    end
  end
  redis.call('PEXPIRE', hist, age)
  redis.call('PEXPIRE', index, age)
end

-- decoded returns JSON s decoded, or nil.
local function decoded(s)
  local ok, r = pcall(cjson.decode, s or '')
  return ok and r or nil
end

-- How long a pipeline's stage counts (keys.Stages) outlive the last batch
-- of it that ended, ms: a week, as the index of queues keeps a name.
local STAGES_TTL = '604800000'
-- write_histories writes records recs[i] (JSON; decs[i] is it decoded,
-- or nil) of batches ids[i] into the queue's history at time t, and counts
-- each in the queue's totals (hash "<base>ended": "outcome:<outcome>"
-- batches, "kind:<kind>" failed elements, by its failed_by,
-- "backups:<started|won|wasted>" backup tasks, by its backups), and a
-- pipeline's batch in its pipeline's stage counts (keys.Stages), taking back
-- what a record it overwrites counted. The totals only grow otherwise: a
-- trim of the history keeps them. A few calls for all the records: one
-- read of those they overwrite, one write of the records, one of the index,
-- one increment per total they change, and a few per stage of a pipeline.
-- A batch named twice is written once, with its last record.
local function write_histories(base, hist, index, ids, recs, decs, t)
  local last, keep = {}, {}
  for i = 1, #ids do
    last[ids[i]] = i
  end
  for i = 1, #ids do
    if last[ids[i]] == i then
      keep[#keep + 1] = i
    end
  end
  local change, fields = {}, {} -- a field of "<base>ended" -> its change
  local function add(f, n)
    if not change[f] then
      change[f] = 0
      fields[#fields + 1] = f
    end
    change[f] = change[f] + n
  end
  -- count counts record r (decoded) in the totals with sign: 1, or -1 to
  -- take back a record that is overwritten.
  local function count(r, sign)
    if type(r) ~= 'table' then
      return
    end
    if type(r.outcome) == 'string' then
      add('outcome:' .. r.outcome, sign)
    end
    if type(r.failed_by) == 'table' then
      for kind, n in pairs(r.failed_by) do
        if type(n) == 'number' then
          add('kind:' .. tostring(kind), sign * n)
        end
      end
    end
    if type(r.backups) == 'table' then
      for _, k in ipairs({'started', 'won', 'wasted'}) do
        if type(r.backups[k]) == 'number' and r.backups[k] > 0 then
          add('backups:' .. k, sign * r.backups[k])
        end
      end
    end
  end
  -- stage counts record r (decoded) of a pipeline's batch in its
  -- pipeline's stage counts ("<stage>\t<field>"), with sign as count does
  -- (wire.StageCounts.Add counts alike, in a manager);
  -- a batch that runs a stage's elements again (call.rerun) among its
  -- reruns only. A record counted (sign 1) also sets its stage's func, its
  -- first start, its last end and that end's outcome.
  local stage_change, stage_keys, stage_set = {}, {}, {}
  local function stage(r, sign)
    if type(r) ~= 'table' or type(r.call) ~= 'table' or type(r.call.pipeline) ~= 'string' or type(r.call.stage) ~= 'string' then
      return
    end
    local k = base .. 'stages:' .. r.call.pipeline
    if not stage_change[k] then
      stage_change[k], stage_set[k] = {}, {}
      stage_keys[#stage_keys + 1] = k
    end
    local ch, st = stage_change[k], r.call.stage .. '\t'
    local function num(v)
      return type(v) == 'number' and v or 0
    end
    local function inc(f, n)
      ch[st .. f] = (ch[st .. f] or 0) + n
    end
    if r.call.rerun then
      inc('reruns', sign)
    else
      inc('batches', sign)
      inc('total', sign * num(r.total))
      inc('done', sign * num(r.done))
      inc('failed', sign * num(r.failed))
      inc('failed_keys', sign * num(r.failed_keys))
    end
    if sign > 0 then
      stage_set[k][#stage_set[k] + 1] = r
    end
  end
  for j = 1, #keep, CHUNK do
    local these, pairs_, scored = {}, {}, {}
    for k = j, math.min(j + CHUNK - 1, #keep) do
      local i = keep[k]
      these[#these + 1] = ids[i]
      pairs_[#pairs_ + 1] = ids[i]
      pairs_[#pairs_ + 1] = recs[i]
      scored[#scored + 1] = t
      scored[#scored + 1] = ids[i]
    end
    local olds = guarded('HMGET', hist, unpack(these))
    for k = 1, #olds do
      if olds[k] then
        local r = decoded(olds[k])
        count(r, -1)
        stage(r, -1)
      end
    end
    redis.call('HSET', hist, unpack(pairs_))
    guarded('ZADD', index, unpack(scored))
  end
  for k = 1, #keep do
    local i = keep[k]
    local r = decs[i] or decoded(recs[i])
    count(r, 1)
    stage(r, 1)
  end
  for _, f in ipairs(fields) do
    if change[f] ~= 0 then
      guarded('HINCRBY', base .. 'ended', f, change[f] == 1 and '1' or change[f])
    end
  end
  for _, k in ipairs(stage_keys) do
    for f, n in pairs(stage_change[k]) do
      if n ~= 0 then
        guarded('HINCRBY', k, f, n)
      end
    end
    for _, r in ipairs(stage_set[k]) do
      local st = r.call.stage .. '\t'
      local first, last = unpack(guarded('HMGET', k, st .. 'started', st .. 'ended'))
      local started, ended = tonumber(r.started_ms) or 0, tonumber(r.ended_ms) or 0
      if started > 0 and (not tonumber(first) or started < tonumber(first)) then
        redis.call('HSET', k, st .. 'started', started)
      end
      if not tonumber(last) or ended >= tonumber(last) then
        redis.call('HSET', k, st .. 'ended', ended, st .. 'outcome', tostring(r.outcome), st .. 'func', tostring(r.func))
      end
    end
    redis.call('PEXPIRE', k, STAGES_TTL)
  end
end

-- record_solos writes the history records of batches whose only task
-- finish.lua delivered, into the queue's history at base, at time t, as
-- record.lua does for a manager: solos holds, for each, its manager's key
-- prefix, its bounds ("#<most kept>,<oldest kept, ms>,<throughput
-- bucket>,<its life, ms>") and its record (JSON). Each is bounded as it
-- says, forgotten among its manager's published batches, and its elements
-- counted in the throughput counter of its bucket. A record that does not
-- parse, or names another manager, is not written (its manager writes its
-- own).
local function record_solos(base, solos, t)
  local ids, recs, decs = {}, {}, {}
  local bounds, bounds_order = {}, {} -- "<keep>,<age>" -> {keep, age}
  local batches, batches_order = {}, {} -- manager prefix -> its batch ids
  local tps, tps_order = {}, {} -- throughput key -> {elements, life}
  for i = 1, #solos, 3 do
    local m, spec, rec = solos[i], solos[i + 1], solos[i + 2]
    local keep, age, bucket, life = string.match(spec, '^#(%d+),(%d+),(%d+),(%d+)$')
    local r = decoded(rec)
    if keep and type(r) == 'table' and type(r.id) == 'string' and type(r.total) == 'number'
        and base .. 'm:' .. tostring(r.manager) == m then
      local n = #ids + 1
      ids[n], recs[n], decs[n] = r.id, rec, r
      local b = keep .. ',' .. age
      if not bounds[b] then
        bounds[b] = {tonumber(keep), age} -- the age as read: see BELL_TTL
        bounds_order[#bounds_order + 1] = b
      end
      if not batches[m] then
        batches[m] = {}
        batches_order[#batches_order + 1] = m
      end
      local mine = batches[m]
      mine[#mine + 1] = r.id
      if r.total > 0 then
        local tp = base .. 'tp:' .. bucket
        if not tps[tp] then
          tps[tp] = {0, life}
          tps_order[#tps_order + 1] = tp
        end
        tps[tp][1] = tps[tp][1] + r.total
      end
    end
  end
  if #ids == 0 then
    return
  end
  local hist, index = base .. 'history', base .. 'history:at'
  write_histories(base, hist, index, ids, recs, decs, t)
  for _, b in ipairs(bounds_order) do
    trim_history(hist, index, bounds[b][1], bounds[b][2], t)
  end
  for _, m in ipairs(batches_order) do
    local mine = batches[m]
    for j = 1, #mine, CHUNK do
      guarded('HDEL', m .. ':batches', unpack(mine, j, math.min(j + CHUNK - 1, #mine)))
    end
  end
  for _, tp in ipairs(tps_order) do
    guarded('INCRBY', tp, tps[tp][1])
    redis.call('PEXPIRE', tp, tps[tp][2])
  end
end

-- RUNNING_ONLY are the fields of a batch's progress (wire.BatchProgress)
-- that only a running batch has: its record leaves them out.
local RUNNING_ONLY = {'rate', 'eta', 'started', 'waiting', 'durable'}

-- copy_progress copies into rec, a batch's history record (wire.BatchRecord,
-- whose own fields it keeps), its last published progress pr, decoded,
-- whole but for RUNNING_ONLY: the mirror of wire.BatchProgress.Record, so
-- that what a manager publishes of a batch reaches its record with no field
-- named here. It returns rec.
local function copy_progress(rec, pr)
  for k, v in pairs(pr) do
    if type(k) == 'string' and rec[k] == nil then
      rec[k] = v
    end
  end
  for _, k in ipairs(RUNNING_ONLY) do
    if pr[k] ~= nil then
      rec[k] = nil
    end
  end
  return rec
end

-- with_progress is copy_progress of progress p (JSON, from a manager's
-- batches hash), if it decodes to an object; it returns rec.
local function with_progress(rec, p)
  local ok, pr = pcall(cjson.decode, p or '')
  if ok and type(pr) == 'table' then
    copy_progress(rec, pr)
  end
  return rec
end

-- How long the batches of a lost manager are kept for the calls that
-- record them a slice at a time (keys.LostBatches, keys.Losing), ms: a day.
local LOST_TTL = '86400000'

-- withdraw_manager withdraws every task of manager mid of the queue at
-- base from one shard, in one step (for shard 0, the step that finds it
-- lost): its lanes and their keys go, and its task set, so that no worker
-- takes another of its tasks (a take drops an id whose task is not in its
-- set, and a result of a task that was running is discarded). A manager
-- that was only cut off finds its task set gone when it comes back, as
-- after Redis lost its writes, and submits again what has no result. Its
-- cost is a few commands a lane: the lanes are its batches with tasks
-- queued, which every take walks anyway; the keys go with UNLINK, freed
-- beside Redis's thread however many tasks they hold.
local function withdraw_manager(base, mid)
  local m = base .. 'm:' .. mid
  for _, lane in ipairs(guarded('HKEYS', m .. ':lanes')) do
    local list = base .. 'l:' .. mid .. '.' .. lane
    redis.call('UNLINK', list)
    unlane(list)
  end
  redis.call('UNLINK', m .. ':lanes', m .. ':tasks', m .. ':attempts')
end

-- record_lost records up to budget of the batches manager mid published
-- last, set aside when it was found lost (keys.LostBatches), in the
-- queue's history as ended with outcome "manager lost" at time t, with
-- their last published progress; a batch the history already holds (its
-- manager came back and recorded it) is only forgotten. Returns the budget
-- left (above 0 only if none is left) and the number recorded.
local function record_lost(base, mid, hist, index, budget, t)
  if budget <= 0 then
    return budget, 0
  end
  local key = base .. 'm:' .. mid .. ':lost'
  local ids = guarded('HRANDFIELD', key, budget)
  local n = 0
  for _, id in ipairs(ids) do
    local ok, p = pcall(cjson.decode, redis.call('HGET', key, id) or '')
    if ok and type(p) == 'table' and guarded('HEXISTS', hist, id) == 0 then
      local rec = copy_progress({id = id, manager = mid, outcome = 'manager lost',
        reason = 'its manager stopped publishing progress; its queued tasks were withdrawn', ended_ms = t}, p)
      redis.call('HSET', hist, id, cjson.encode(rec))
      guarded('ZADD', index, t, id)
      n = n + 1
    end
  end
  for i = 1, #ids, CHUNK do
    redis.call('HDEL', key, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
  end
  return budget - #ids, n
end

-- lose_managers finds the managers of the queue at base whose publish of
-- progress is overdue by the Redis clock (in the sorted set managers) and,
-- in the step that finds each, withdraws its tasks of this shard
-- (withdraw_manager; the caller withdraws those of the others,
-- withdraw.lua) and sets its published batches aside (keys.LostBatches),
-- adding it to the set losing. Then, a slice a call, it records each
-- batch set aside as ended with outcome "manager lost" and its last
-- published progress (record_lost); a manager leaves losing when none is
-- left. A durable batch's owner is only forgotten: its batch runs on
-- without a manager. The history is bounded by limit and age (ms). At most
-- BUDGET batches recorded a call, and 10 managers found. Returns how many
-- batches it recorded, the ids of the managers it found lost, and whether
-- work is left for another call.
local function lose_managers(base, managers, losing, hist, index, limit, age)
  local t = now()
  local budget, n = BUDGET, 0
  local withdrawn = {}
  local function drain(mid)
    local k
    budget, k = record_lost(base, mid, hist, index, budget, t)
    n = n + k
    if budget > 0 then
      redis.call('SREM', losing, mid)
    end
  end
  -- the managers found lost before, a few at most: a call empties them
  -- as long as it has budget
  for _, mid in ipairs(guarded('SMEMBERS', losing)) do
    if budget <= 0 then
      break
    end
    drain(mid)
  end
  if budget > 0 then
    for _, mid in ipairs(guarded('ZRANGEBYSCORE', managers, '-inf', t, 'LIMIT', 0, 10)) do
      if budget <= 0 then
        break
      end
      if string.sub(mid, 1, 1) == 'D' then
        -- A durable batch's owner (id.Durable): its batch is not lost but
        -- waits, running, for the next call to take it over; its last
        -- progress stays for operators until it expires.
        redis.call('ZREM', managers, mid)
      elseif redis.call('SISMEMBER', losing, mid) == 0 then
        -- (a manager still in losing, lost again, is found again once
        -- its earlier batches are recorded)
        withdraw_manager(base, mid)
        local m = base .. 'm:' .. mid
        if redis.call('EXISTS', m .. ':batches') == 1 then
          redis.call('RENAME', m .. ':batches', m .. ':lost')
          redis.call('PEXPIRE', m .. ':lost', LOST_TTL)
        end
        redis.call('ZREM', managers, mid)
        redis.call('SADD', losing, mid)
        redis.call('PEXPIRE', losing, LOST_TTL)
        withdrawn[#withdrawn + 1] = mid
        drain(mid)
      end
    end
  end
  if n > 0 then
    -- Each was new (HEXISTS): counted at once, one increment for all.
    guarded('HINCRBY', base .. 'ended', 'outcome:manager lost', n)
    trim_history(hist, index, limit, age, t)
  end
  local more = redis.call('SCARD', losing) > 0 or
    #redis.call('ZRANGEBYSCORE', managers, '-inf', t, 'LIMIT', 0, 1) > 0
  return n, withdrawn, more
end

-- Limits (keys.Limits): a function's fleet-wide rate and concurrency cap,
-- enforced by take.lua. A limited function's tasks that count against its
-- cap are listed in "<base>lim:held" (task id -> function) and in the
-- function's running hash (limit_key .. ':run', task id -> worker); the
-- workers a take refused for want of a slot wait in limit_key .. ':wait'.

-- limit_key returns the prefix of function fn's limit keys (see
-- keys.LimitRunning): its name is any printable string, so it goes by its
-- hash.
local function limit_key(base, fn)
  return base .. 'lim:' .. string.sub(redis.sha1hex(fn), 1, 16)
end

-- unhold_limited returns task tid's slot to its function's concurrency
-- cap, if it holds one, and rings the workers waiting for a slot. Every
-- script that ends a hold calls it: finish, give back, reap.
local function unhold_limited(base, tid)
  local held = base .. 'lim:held'
  local fn = guarded('HGET', held, tid)
  if not fn then
    return
  end
  redis.call('HDEL', held, tid)
  local k = limit_key(base, fn)
  guarded('HDEL', k .. ':run', tid)
  local waiting = guarded('SMEMBERS', k .. ':wait')
  if #waiting > 0 then
    for _, w in ipairs(waiting) do
      ring_worker(base, w)
    end
    redis.call('DEL', k .. ':wait')
  end
end

-- finite returns s as a number if it is one, finite and at least 0; else
-- nil. What a limit's fields read from Redis go through it: a crafted value
-- must not make a script fail or wait for ever.
local function finite(s)
  local x = tonumber(s)
  if x and x == x and x >= 0 and x < math.huge then
    return x
  end
  return nil
end

-- parse_limit returns the limit in force v (keys.Limits: "<rate> <per ms>
-- <burst> <concurrency>") as a table {rate, per, burst, conc}, rate 0 for
-- none, conc 0 for none; nil if it limits nothing or does not parse.
local function parse_limit(v)
  local a, b, c, d = string.match(v or '', '^(%S+) (%S+) (%S+) (%S+)$')
  local rate, per, burst, conc = finite(a), finite(b), finite(c), finite(d)
  if not (rate and per and burst and conc) then
    return nil
  end
  conc = math.floor(conc)
  if rate <= 0 or per <= 0 then
    rate = 0
  end
  if rate == 0 and conc == 0 then
    return nil
  end
  return {rate = rate, per = per, burst = math.max(1, math.floor(burst)), conc = conc}
end
