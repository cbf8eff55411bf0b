-- failures.lua: add the failure groups a worker saw since its last
-- heartbeat to the queue's: counts add up, first and last seen widen, the
-- last one's message, task and stack are kept (a stack is never replaced
-- by none), and the workers that saw a group are named (up to
-- MAX_WORKERS). Past ARGV[1] groups, a new group's failures count in the
-- group "(other)" of its function and kind, so every failure is counted.
-- KEYS[1] the queue's failure-groups hash (field "<func>\t<kind>\t<fingerprint>"
-- -> JSON group, see rdb.FailureGroup)
-- ARGV[1] most groups   ARGV[2] how long the hash outlives its last write, ms
-- ARGV[3] the worker's id   ARGV[4], ARGV[5], ...: field, JSON group, ...
-- Returns the number of failures added.
local MAX_WORKERS = 10
local added = 0
for i = 4, #ARGV, 2 do
  local field, d = ARGV[i], cjson.decode(ARGV[i + 1])
  local cur = redis.call('HGET', KEYS[1], field)
  if not cur and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then
    d.fingerprint = '(other)'
    field = d.func .. '\t' .. d.kind .. '\t(other)'
    cur = redis.call('HGET', KEYS[1], field)
  end
  local g = d
  if cur then
    g = cjson.decode(cur)
    g.count = g.count + d.count
    g.first_ms = math.min(g.first_ms, d.first_ms)
    if d.last_ms >= g.last_ms then
      g.last_ms, g.sample, g.task = d.last_ms, d.sample, d.task
    end
    if d.stack and d.stack ~= '' then
      g.stack = d.stack
    end
    local seen, n = false, 0
    for w in string.gmatch(g.workers or '', '[^,]+') do
      n = n + 1
      seen = seen or w == ARGV[3]
    end
    if not seen and n < MAX_WORKERS then
      g.workers = (g.workers ~= nil and g.workers ~= '') and (g.workers .. ',' .. ARGV[3]) or ARGV[3]
    end
  else
    g.workers = ARGV[3]
  end
  redis.call('HSET', KEYS[1], field, cjson.encode(g))
  added = added + d.count
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return added
