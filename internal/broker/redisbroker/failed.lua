-- failed.lua: record failed elements of an ended batch for operators
-- (redmap failures -batch), a slice at a time: the first slice replaces
-- what the hash held (a batch recorded again, by a manager that came back,
-- lists its own), the others add to it. A field is set, never added to, so
-- a call retried after a dropped connection writes the same hash.
-- KEYS[1] the batch's failed-elements hash (keys.FailedElements)
-- ARGV[1] "1" for the first slice   ARGV[2] how long the hash lives, ms
-- (the history's age: trim_history deletes it with the batch's record)
-- ARGV[3] most elements the hash holds   ARGV[4] failed elements left out
-- (by the first slice; the others send 0)
-- ARGV[5], ARGV[6], ...: field (wire.FailedElement.Field: its index, or its key), JSON element, ...
-- An element past the hash's cap is counted among those left out.
-- A hash holding foreign data is set aside (set_aside).
-- Returns the number of elements the hash holds.
if ARGV[1] == '1' then
  redis.call('DEL', KEYS[1])
end
local most, over = tonumber(ARGV[3]), 0
local n = guarded('HLEN', KEYS[1])
if redis.call('HEXISTS', KEYS[1], 'omitted') == 1 then
  n = n - 1
end
for i = 5, #ARGV, 2 do
  if n < most or redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    if redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
      n = n + 1
    end
  else
    over = over + 1
  end
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'omitted', tonumber(ARGV[4]) + over)
elseif over > 0 then
  redis.call('HINCRBY', KEYS[1], 'omitted', over)
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return n
