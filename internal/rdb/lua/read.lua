-- read.lua: trim the results a manager has handled, then return the next ones.
-- The trim must be idempotent: a client that retries this call after a
-- dropped connection must not trim results nobody read. So it trims the first
-- n entries only if entry n is still the one the manager saw there (by the
-- SHA-1 of all of it); run again, the check fails and nothing more is trimmed.
-- KEYS[1] result list of the manager
-- ARGV[1] n, entries handled (0 for none)   ARGV[2] the SHA-1 (hex) of entry n
-- ARGV[3] most entries to return
-- Returns up to ARGV[3] entries from the front of the list, after the trim.
local n = tonumber(ARGV[1])
if n > 0 then
  local last = redis.call('LINDEX', KEYS[1], n - 1)
  if last and redis.sha1hex(last) == ARGV[2] then
    redis.call('LTRIM', KEYS[1], n, -1)
  end
end
return redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
