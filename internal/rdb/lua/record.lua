-- record.lua: write batches that ended into the queue's history, and forget
-- them among their manager's published running batches; then keep the
-- history to its bounds; and count the elements that ended since the
-- manager's last publish in the queue's throughput.
-- KEYS[1] history hash   KEYS[2] history index (batch id -> ended, Redis ms)
-- KEYS[3] the manager's batches hash   KEYS[4] the throughput counter of now
-- ARGV[1] most batches kept   ARGV[2] oldest kept, ms
-- ARGV[3] key base "<prefix>:{<queue>}:" (the totals: see write_histories)
-- ARGV[4] elements the manager saw end since it last said (publish.lua)
-- ARGV[5] the throughput counter's life, ms
-- ARGV[6], ARGV[7], ...: batch id, its JSON record, ...
-- Returns the number of batches written.
local t = now()
local ids, recs = {}, {}
for i = 6, #ARGV, 2 do
  ids[#ids + 1], recs[#recs + 1] = ARGV[i], ARGV[i + 1]
end
if #ids > 0 then
  write_histories(ARGV[3], KEYS[1], KEYS[2], ids, recs, {}, t)
  for j = 1, #ids, CHUNK do
    redis.call('HDEL', KEYS[3], unpack(ids, j, math.min(j + CHUNK - 1, #ids)))
  end
end
local ended = tonumber(ARGV[4])
if ended > 0 then
  redis.call('INCRBY', KEYS[4], ended)
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[5]))
end
trim_history(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), t)
return (#ARGV - 5) / 2
