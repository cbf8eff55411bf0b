-- pause.lua: pause or resume the taking of one shard of a queue. A pause
-- leaves its mark (keys.Paused), kept as it is if the shard is paused
-- already; takes then take nothing (take.lua). A resume deletes it and
-- rings every idle worker of the shard, which takes again at once. A
-- follow, by a manager that found shard 0 paused as it published the
-- queue's shard names, gives another shard the mark for ARGV[4] ms, unless
-- an operator's pause marked it for good: a shard added to a paused queue
-- is paused too, and a copy made as the queue was resumed goes soon.
-- KEYS[1] the shard's pause mark   KEYS[2] its idle set
-- ARGV[1] "pause", "resume" or "follow"   ARGV[2] the mark (JSON
-- wire.Pause; pause, follow)   ARGV[3] the shard's key base
-- "<prefix>:{<shard>}:"   ARGV[4] how long a followed mark lives, ms
-- Returns 1 if the shard was paused (pause, follow) or resumed (resume) by
-- this call, else 0; then, resuming, how many idle workers it rang.
local mode = ARGV[1]
if mode == 'pause' then
  if redis.call('SET', KEYS[1], ARGV[2], 'NX') then
    return {1, 0}
  end
  return {0, 0}
elseif mode == 'follow' then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl == -1 then
    return {0, 0}
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
  return {ttl == -2 and 1 or 0, 0}
end
if redis.call('DEL', KEYS[1]) == 0 then
  return {0, 0}
end
local rung = 0
for _, wid in ipairs(guarded('SMEMBERS', KEYS[2])) do
  ring_worker(ARGV[3], wid)
  rung = rung + 1
end
return {1, rung}
