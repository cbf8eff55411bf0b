-- heartbeat.lua: register a worker, or renew its lease, with a deadline taken
-- from the Redis clock, so clock skew between machines does not matter; and
-- publish what the worker tells operators, expiring with the lease.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- KEYS[2] the worker's info hash   KEYS[3] the worker's drain flag
-- KEYS[4] the queue's list of shard names (see shards.lua)
-- ARGV[1] worker id   ARGV[2] lease length, ms
-- ARGV[3], ARGV[4], ...: info field, value, field, value, ... (may be none)
-- Returns {the new deadline, ms; 1 if an operator asked the worker to drain;
-- the number of names in the queue's list of shard names}.
local lease = tonumber(ARGV[2])
local deadline = now() + lease
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
if #ARGV > 2 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
  if lease > 0 then
    redis.call('PEXPIRE', KEYS[2], lease)
  else
    redis.call('DEL', KEYS[2])
  end
end
return {deadline, redis.call('EXISTS', KEYS[3]), redis.call('LLEN', KEYS[4])}
