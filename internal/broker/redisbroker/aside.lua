-- aside.lua: set aside keys that hold foreign data (another type: a string
-- SET over a manager's result list, say), so that the reads of them go on:
-- what such a key held is lost (a manager's audit submits again the tasks
-- whose results were there; the other keys are rebuilt by their writers).
-- Logged in Redis's log.
-- KEYS[1..n] the keys   ARGV[1..n] the type each must have: "list", "hash",
-- "set" or "zset" (asked with LLEN, HLEN, SCARD or ZCARD, which fail on
-- another type)
-- Returns the number of keys set aside.
local probe = {list = 'LLEN', hash = 'HLEN', set = 'SCARD', zset = 'ZCARD'}
local n = 0
for i = 1, #ARGV do
  local r = redis.pcall(probe[ARGV[i]], KEYS[i])
  if foreign(r) then
    set_aside(KEYS[i], r.err)
    n = n + 1
  elseif type(r) == 'table' and r.err then
    error(r)
  end
end
return n
