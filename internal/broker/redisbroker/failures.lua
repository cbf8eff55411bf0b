-- failures.lua: add the failure groups a worker saw since its last
-- heartbeat to the queue's: counts add up, first and last seen widen, the
-- last one's message, task and stack are kept (a stack is never replaced
-- by none), and the workers that saw a group are named (up to
-- MAX_WORKERS). Past ARGV[1] groups, a new group's failures count in the
-- queue's group "(other)" of their kind (function "(other)"), so every
-- failure is counted and the hash holds at most ARGV[1] groups plus one
-- per kind, however many function names there are. A field whose value is
-- not a group this script wrote (bytes written by hand, a bug) is replaced
-- by the new group rather than stopping the script half way, which would
-- leave the groups before it counted and have the worker send them again.
-- KEYS[1] the queue's failure-groups hash (field "<func>\t<kind>\t<fingerprint>"
-- -> JSON group, see wire.FailureGroup)
-- ARGV[1] most groups   ARGV[2] how long the hash outlives its last write, ms
-- ARGV[3] the worker's id   ARGV[4], ARGV[5], ...: field, JSON group, ...
-- A hash holding foreign data is set aside (set_aside).
-- Returns {the number of failures added, the number of malformed groups replaced}.
local MAX_WORKERS = 10
local added, malformed = 0, 0

-- group returns the decoded group in s, or nil if s is not one.
local function group(s)
  local ok, g = pcall(cjson.decode, s)
  if not ok or type(g) ~= 'table' or type(g.count) ~= 'number' or type(g.first_ms) ~= 'number'
      or type(g.last_ms) ~= 'number' or (g.workers ~= nil and type(g.workers) ~= 'string') then
    return nil
  end
  return g
end

for i = 4, #ARGV, 2 do
  local field, d = ARGV[i], cjson.decode(ARGV[i + 1])
  local raw = guarded('HGET', KEYS[1], field)
  if not raw and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then
    d.func, d.fingerprint = '(other)', '(other)'
    field = '(other)\t' .. d.kind .. '\t(other)'
    raw = redis.call('HGET', KEYS[1], field)
  end
  local g, cur = d, raw and group(raw)
  if raw and not cur then
    malformed = malformed + 1
  end
  if cur then
    g = cur
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
return {added, malformed}
