-- heartbeat.lua: register a worker, or renew its lease, with a deadline taken
-- from the Redis clock, so clock skew between machines does not matter.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- ARGV[1] worker id   ARGV[2] lease length, ms
-- Returns the new deadline, ms.
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
return deadline
