-- index.lua: name a queue in the index of queues (keys.QueueIndex), by the
-- Redis clock, and drop the names no writer renewed within the index's age.
-- KEYS[1] the index of queues (ZSET queue name -> when last named, Redis ms)
-- ARGV[1] the queue's name   ARGV[2] how long a name stays unrenewed, ms
-- An index holding foreign data is set aside (set_aside): writers name
-- their queues again.
-- Returns the number of names dropped.
local t = now()
local age = tonumber(ARGV[2])
guarded('ZADD', KEYS[1], t, ARGV[1])
-- The index itself goes once no writer has named any queue for as long.
redis.call('PEXPIRE', KEYS[1], age)
return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (t - age))
