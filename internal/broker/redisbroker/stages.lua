-- stages.lua: a manager puts back a pipeline's stage counts (keys.Stages)
-- that Redis lost (a FLUSHALL, a failover, an eviction), from what it
-- counted of the batches of the pipeline it ran and recorded
-- (wire.StageCounts, counted as write_histories counts them). Each count
-- the key holds below the manager's is raised to it, never lowered: what
-- the key counted of other records (another manager's, before a takeover)
-- stays, and no record is counted twice, as both count records that were
-- written. A stage's first start is the earlier one, its last end (with
-- its outcome and function) the later one.
-- KEYS[1] the pipeline's stage counts
-- ARGV[1] the stages, JSON (an array of wire.StageCounts)
-- A hash holding foreign data is set aside (set_aside).
-- Returns the number of fields written.
local ok, stages = pcall(cjson.decode, ARGV[1])
if not ok or type(stages) ~= 'table' then
  return redis.error_reply('stages: ARGV[1] is not a JSON array of stage counts')
end
local COUNTS = {'batches', 'reruns', 'total', 'done', 'failed', 'failed_keys'}
local n = 0
for _, s in ipairs(stages) do
  if type(s) == 'table' and type(s.stage) == 'string' then
    local st = s.stage .. '\t'
    local fields = {}
    for i, f in ipairs(COUNTS) do
      fields[i] = st .. f
    end
    fields[#fields + 1] = st .. 'started'
    fields[#fields + 1] = st .. 'ended'
    local have = guarded('HMGET', KEYS[1], unpack(fields))
    local set = {}
    for i, f in ipairs(COUNTS) do
      local want = tonumber(s[f]) or 0
      if want > (tonumber(have[i]) or 0) then
        set[#set + 1] = fields[i]
        set[#set + 1] = want
      end
    end
    local started, ended = tonumber(s.started) or 0, tonumber(s.ended) or 0
    local first, last = tonumber(have[#COUNTS + 1]), tonumber(have[#COUNTS + 2])
    if started > 0 and (not first or started < first) then
      set[#set + 1] = st .. 'started'
      set[#set + 1] = started
    end
    if ended > 0 and (not last or ended > last) then
      set[#set + 1] = st .. 'ended'
      set[#set + 1] = ended
      set[#set + 1] = st .. 'outcome'
      set[#set + 1] = tostring(s.outcome)
      set[#set + 1] = st .. 'func'
      set[#set + 1] = tostring(s.func)
    end
    if #set > 0 then
      redis.call('HSET', KEYS[1], unpack(set))
      n = n + #set / 2
    end
  end
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], STAGES_TTL)
end
return n
