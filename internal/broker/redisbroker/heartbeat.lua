-- heartbeat.lua: register a worker, or renew its lease, with a deadline taken
-- from the Redis clock, so clock skew between machines does not matter; and
-- publish what the worker tells operators. A lease
-- of 0 or less retires the worker (its lease ends now, and reap.lua
-- records it gone): what it publishes then is kept for as long as a gone
-- worker stays listed.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- KEYS[2] the worker's info hash   KEYS[3] the worker's drain flag
-- KEYS[4] the queue's list of shard names (see shards.lua)
-- ARGV[1] worker id   ARGV[2] lease length, ms
-- ARGV[3] how long a gone worker stays listed, ms (keys.GoneFor)
-- ARGV[4], ARGV[5], ...: info field, value, field, value, ... (may be none)
-- The workers set, the info hash and the list of shard names are set aside
-- if they hold foreign data (guarded): the heartbeats of the queue's workers
-- write the first two again, its managers the list.
-- Returns {the new deadline, ms; 1 if an operator asked the worker to drain;
-- the number of names in the queue's list of shard names}.
local lease = tonumber(ARGV[2])
local deadline = now() + lease
guarded('ZADD', KEYS[1], deadline, ARGV[1])
if #ARGV > 3 then
  guarded('HSET', KEYS[2], unpack(ARGV, 4))
  if lease > 0 then
    -- past the lease too: a worker that dies is listed with it until
    -- reaped, and for as long as a gone worker is then; a worker reaped
    -- while stalled that comes back is no longer gone
    redis.call('HDEL', KEYS[2], 'gone')
    redis.call('PEXPIRE', KEYS[2], lease + tonumber(ARGV[3]))
  else
    redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[3]))
  end
end
return {deadline, redis.call('EXISTS', KEYS[3]), guarded('LLEN', KEYS[4])}
