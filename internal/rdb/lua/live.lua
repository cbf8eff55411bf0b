-- live.lua: list the workers whose lease has not expired, by the Redis clock.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- Returns the ids of live workers, in deadline order.
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now(), '+inf')
