-- hold.lua: add or renew a hold on a cached object; with a size and a part
-- count, first commit a freshly uploaded object.
-- Every hold moves the expiry of all the object's keys to the latest deadline
-- of its holders, so that when every holder has died without releasing, Redis
-- itself deletes the object: nothing leaks, and no sweeper is needed.
-- A commit checks that every part is there: the parts are stored first, each
-- with an expiry (so an upload cut short leaks nothing), and a release may
-- have deleted an older copy of the same object meanwhile; then nothing is
-- committed and the caller uploads again.
-- KEYS[1] object metadata (HASH size, parts)   KEYS[2] holders (ZSET holder -> deadline, ms)
-- ARGV[1] holder   ARGV[2] length of the hold, ms
-- ARGV[3] size in bytes, ARGV[4] number of parts: given only to commit
-- A key holding foreign data is set aside (set_aside): an object whose
-- metadata is foreign is not there.
-- Returns 1 if the object is there and now held, 0 if it is not there.
if ARGV[4] then
  local parts = tonumber(ARGV[4])
  for i = 0, parts - 1 do
    if redis.call('EXISTS', KEYS[1] .. ':p:' .. i) == 0 then
      return 0
    end
  end
  guarded('HSET', KEYS[1], 'size', ARGV[3], 'parts', parts)
elseif not tonumber(guarded('HGET', KEYS[1], 'parts')) then
  return 0 -- not there, or set aside: the caller uploads it again
end
guarded('ZADD', KEYS[2], now() + tonumber(ARGV[2]), ARGV[1])
local last = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
expire_object(KEYS[1], KEYS[2], tonumber(redis.call('HGET', KEYS[1], 'parts')) or 0, last)
return 1
