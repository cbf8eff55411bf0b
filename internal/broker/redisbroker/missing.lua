-- missing.lua: say which of a manager's outstanding tasks its task set no
-- longer holds, after Redis lost writes, with the set's count of submitted
-- tasks and its epoch read in the same step, so that all come from one
-- server even while a failover moves clients from one to another.
-- KEYS[1] task set of the manager
-- ARGV[1], ...: task ids
-- A task set holding foreign data fails the call (redisbroker names the key): its
-- manager fails its tasks and sets it aside.
-- Returns {the count ("_", 0 if none), the epoch ("_e", "" if none), the task
-- ids not in the set...}.
local out = {tonumber(redis.call('HGET', KEYS[1], '_') or '0') or 0, redis.call('HGET', KEYS[1], '_e') or ''}
for i = 1, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    out[#out + 1] = ARGV[i]
  end
end
return out
