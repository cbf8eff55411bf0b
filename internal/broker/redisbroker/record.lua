-- record.lua: write batches that ended into the queue's history, and forget
-- them among their manager's published running batches; then keep the
-- history to its bounds; and count the elements that ended since the
-- manager's last publish in the queue's throughput.
-- KEYS[1] history hash   KEYS[2] history index (batch id -> ended, Redis ms)
-- KEYS[3] the manager's batches hash   KEYS[4] the throughput counter of now
-- KEYS[5] a durable batch's fence (keys.Fence; only with ARGV[6] set)
-- ARGV[1] most batches kept   ARGV[2] oldest kept, ms
-- ARGV[3] key base "<prefix>:{<queue>}:" (the totals: see write_histories)
-- ARGV[4] elements the manager saw end since it last said (publish.lua)
-- ARGV[5] the throughput counter's life, ms
-- ARGV[6] the claim a durable batch's owner holds (redisbroker.Fence), or "": an
-- owner whose claim is no longer the fence writes nothing, so that the
-- record of the manager that took the batch over stays
-- ARGV[7], ARGV[8], ...: batch id, its JSON record, ... (at most BUDGET
-- batches: a caller with more calls again)
-- A key holding foreign data is set aside (set_aside).
-- Returns the number of batches written; the error "FENCED <the fence>" if
-- fenced.
if ARGV[6] ~= '' then
  local fence = fence_check(KEYS[5], ARGV[6])
  if fence then
    return redis.error_reply('FENCED ' .. fence)
  end
end
if (#ARGV - 6) / 2 > BUDGET then
  return redis.error_reply('record.lua: more than ' .. BUDGET .. ' batches in one call')
end
local t = now()
local ids, recs = {}, {}
for i = 7, #ARGV, 2 do
  ids[#ids + 1], recs[#recs + 1] = ARGV[i], ARGV[i + 1]
end
if #ids > 0 then
  write_histories(ARGV[3], KEYS[1], KEYS[2], ids, recs, {}, t)
  for j = 1, #ids, CHUNK do
    guarded('HDEL', KEYS[3], unpack(ids, j, math.min(j + CHUNK - 1, #ids)))
  end
end
local ended = tonumber(ARGV[4])
if ended > 0 then
  guarded('INCRBY', KEYS[4], ended)
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[5]))
end
trim_history(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), t)
return (#ARGV - 6) / 2
