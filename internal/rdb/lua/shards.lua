-- shards.lua: record that a manager spreads the queue's tasks over n shards
-- (see keys.Shard). The queue's shard count becomes the highest any manager
-- uses; workers read it with their heartbeat and serve that many shards. It
-- lives a week after the last manager that published it.
-- KEYS[1] the queue's shard count (in shard 0)
-- ARGV[1] n, at least 1
-- Returns the queue's shard count.
local n = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < n then
  redis.call('SET', KEYS[1], n)
  cur = n
end
redis.call('PEXPIRE', KEYS[1], 604800000)
return cur
