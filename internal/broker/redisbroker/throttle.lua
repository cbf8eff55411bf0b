-- throttle.lua: a function answered redmap.RetryAfter(d): if its limit in
-- force has a rate, no take starts an element of it for d, then the rate
-- resumes from an empty bucket (its theoretical arrival time moves to d
-- plus a burst's worth from now, unless it is later already).
-- KEYS[1] the queue's limits (HASH)   KEYS[2] the limits' state (HASH)
-- ARGV[1] the function   ARGV[2] d, ms (at most a day)
-- Each call of a function with a limit counts in the limits' state
-- ("r\t<func>": the waits its elements made for RetryAfter).
-- A key holding foreign data is set aside (set_aside).
-- Returns 1 if the function's rate was paused, else 0.
local lim = parse_limit(guarded('HGET', KEYS[1], ARGV[1]))
local d = finite(ARGV[2])
if lim then
  guarded('HINCRBY', KEYS[2], 'r\t' .. ARGV[1], 1)
end
if not lim or lim.rate == 0 or not d then
  return 0
end
local T = lim.per / lim.rate
local at = now() + math.min(d, 86400000) + lim.burst * T
local tat = finite(guarded('HGET', KEYS[2], ARGV[1])) or 0
if at > tat then
  redis.call('HSET', KEYS[2], ARGV[1], string.format('%.3f', at))
end
return 1
