-- served.lua: say which functions some live worker of the queue has
-- registered (as its heartbeats publish them), by the Redis clock.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2], ...: function names
-- Returns 1 or 0 per function name, in order.
local base = ARGV[1]
local have = {}
for _, wid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now(), '+inf')) do
  local fns = redis.call('HGET', base .. 'w:' .. wid .. ':info', 'functions')
  if fns then
    for name in string.gmatch(fns, '[^,]+') do
      have[name] = true
    end
  end
end
local out = {}
for i = 2, #ARGV do
  out[#out + 1] = have[ARGV[i]] and 1 or 0
end
return out
