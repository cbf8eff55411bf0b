-- live.lua: list the workers whose lease has not expired, by the Redis clock.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- A set holding foreign data is set aside (set_aside): heartbeats fill it
-- again.
-- Returns the ids of live workers, in deadline order.
return guarded('ZRANGEBYSCORE', KEYS[1], '(' .. now(), '+inf')
