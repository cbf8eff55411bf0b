-- shards.lua: record the names of the shards other than shard 0 a manager
-- spreads the queue's tasks over (see keys.Shard), in the queue's list of
-- shard names; workers serve every shard it names. It lives a week after
-- the last manager that published to it.
-- KEYS[1] the queue's list of shard names (in shard 0)
-- KEYS[2] shard 0's pause mark (keys.Paused)
-- ARGV[1] "adopt" or "add"   ARGV[2], ...: the manager's names, shard 1 first
-- adopt (before a manager's first submit): the names are proposals; shard i
-- takes the list's i-th name where it has one, and the list grows by the
-- proposals past its end. add (every Poll after): the names the list lacks
-- are appended (Redis may have lost it).
-- A list holding foreign data is set aside (set_aside): managers name their
-- shards again (a manager that adopted names keeps them).
-- Returns, for adopt, the names the manager is to use; for add, the list;
-- then, if an operator paused the queue, "\npaused\n" and the mark, which
-- the caller gives the other shards (pause.lua, follow).
local list = KEYS[1]
local out = {}
if ARGV[1] == 'adopt' then
  local have = guarded('LRANGE', list, 0, #ARGV - 2)
  for i = 2, #ARGV do
    local name = have[i - 1]
    if not name then
      name = ARGV[i]
      redis.call('RPUSH', list, name)
    end
    out[#out + 1] = name
  end
else
  for i = 2, #ARGV do
    if not guarded('LPOS', list, ARGV[i]) then
      redis.call('RPUSH', list, ARGV[i])
    end
  end
  out = redis.call('LRANGE', list, 0, -1)
end
redis.call('PEXPIRE', list, 604800000)
local mark = redis.call('GET', KEYS[2])
if mark then
  out[#out + 1] = '\npaused\n' .. mark
end
return out
