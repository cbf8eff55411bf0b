-- probe.lua: try, on throwaway keys, every command redmap's scripts run, and
-- say which Redis refuses, so that a missing ACL permission is named when a
-- worker or a manager starts, not first when a rare path (a reap after a
-- worker died, a recovery after a data loss) needs it.
-- KEYS[1] a throwaway key; the keys derived from it share its hash tag and
-- are deleted before the script returns.
-- Returns the refused commands, each as "NAME: error reply".
local k = KEYS[1]
local h, l, s, z = k .. ':h', k .. ':l', k .. ':s', k .. ':z'
local out = {}
local function try(name, ...)
  local r = redis.pcall(name, ...)
  if type(r) == 'table' and r.err then
    out[#out + 1] = name .. ': ' .. r.err
  end
end
try('TIME')
try('HSET', h, 'f', '1')
try('HGET', h, 'f')
try('HEXISTS', h, 'f')
try('HSTRLEN', h, 'f')
try('HINCRBY', h, 'n', 1)
try('HDEL', h, 'f')
try('HKEYS', h)
try('HMGET', h, 'f', 'n')
try('HLEN', h)
try('HSETNX', h, 'g', '1')
try('HGETALL', h)
try('RPUSH', l, 'a', 'b', 'c')
try('LPUSH', l, 'z')
try('LPOP', l, 1)
try('LLEN', l)
try('LINDEX', l, 0)
try('LPOS', l, 'a')
try('LRANGE', l, 0, -1)
try('LTRIM', l, 0, -1)
try('LMOVE', l, l, 'LEFT', 'RIGHT')
try('LREM', l, -1, 'a')
try('SADD', s, 'a', 'b')
try('SMEMBERS', s)
try('SCARD', s)
try('SISMEMBER', s, 'a')
try('SREM', s, 'a')
try('SPOP', s, 1)
try('ZADD', z, 1, 'a', 2, 'b')
try('ZCARD', z)
try('ZSCORE', z, 'b')
try('ZRANGE', z, 0, -1)
try('ZRANGEBYSCORE', z, '-inf', '+inf')
try('ZREM', z, 'a')
try('ZREMRANGEBYSCORE', z, '-inf', '+inf')
try('INCRBY', k, 1)
try('SET', k, 'v')
try('GET', k)
try('EXISTS', k)
try('PEXPIREAT', k, 4102444800000)
try('PEXPIRE', k, 60000)
try('PTTL', k)
try('HRANDFIELD', h, 2)
redis.pcall('HSET', h, 'r', '1') -- RENAME's source exists: only an ACL refuses it
try('RENAME', h, h .. ':r')
try('UNLINK', h .. ':r', h)
try('DEL', k, h, l, s, z)
return out
