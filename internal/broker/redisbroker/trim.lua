-- trim.lua: trim the results a manager has handled. The manager reads the next
-- ones with a plain LRANGE in the same pipeline (a list read through Lua is
-- copied twice more: into Lua and back into the reply). The trim must be
-- idempotent: a client that retries this call after a dropped connection
-- must not trim results nobody read. So it trims the first n entries only if
-- entry n is still the one the manager saw there (by its mark: the SHA-1 of
-- all of it, or for one longer than 1 KiB of its length, first 512 and last
-- 512 bytes, as redisbroker.Mark computes it); run again, the check fails and nothing
-- more is trimmed.
-- A durable batch's manager keeps what it trims: the entries move to the end
-- of its kept list (keys.Kept), where a manager that takes the batch over
-- finds them. Any other's trim deletes the staged results (keys.Staged,
-- beside the list) its "staged <field>" entries refer to.
-- KEYS[1] result list of the manager   KEYS[2] its kept list (only with
-- ARGV[3] "1": a manager's reads pass none, and KEYS[2] is then the guard)
-- KEYS[3] the durable batch's fence (keys.Fence; only with ARGV[4])
-- ARGV[1] n, entries handled (0 for none)   ARGV[2] the SHA-1 (hex) of entry n
-- ARGV[3] "1" to keep the entries trimmed, "" to drop them
-- ARGV[4] the claim the durable batch's owner holds (redisbroker.Fence), if it
-- holds one: an owner whose claim is no longer the fence trims nothing
-- A key holding foreign data is set aside (set_aside): the manager's audit
-- submits again the tasks whose results it held.
-- Returns 1 if it trimmed, 0 if not; the error "FENCED <the fence>" if
-- fenced.
local function mark(e)
  if #e <= 1024 then
    return redis.sha1hex(e)
  end
  return redis.sha1hex(#e .. ':' .. string.sub(e, 1, 512) .. string.sub(e, -512))
end
if ARGV[4] then
  local fence = fence_check(KEYS[3], ARGV[4])
  if fence then
    return redis.error_reply('FENCED ' .. fence)
  end
end
local n = tonumber(ARGV[1])
if n > 0 then
  local last = guarded('LINDEX', KEYS[1], n - 1)
  if last and mark(last) == ARGV[2] then
    if ARGV[3] == '1' then
      for i = 0, n - 1, CHUNK do
        guarded('RPUSH', KEYS[2], unpack(redis.call('LRANGE', KEYS[1], i, math.min(i + CHUNK, n) - 1)))
      end
      local ttl = redis.call('PTTL', KEYS[1])
      if ttl > 0 then
        redis.call('PEXPIRE', KEYS[2], ttl)
      end
    end
    local staged = string.sub(KEYS[1], 1, -8) .. 'staged' -- "<m>:results"
    if ARGV[3] ~= '1' and redis.call('EXISTS', staged) == 1 then
      local fields = {}
      for i = 0, n - 1, CHUNK do
        for _, e in ipairs(redis.call('LRANGE', KEYS[1], i, math.min(i + CHUNK, n) - 1)) do
          if string.sub(e, 1, 7) == 'staged ' then
            fields[#fields + 1] = string.sub(e, 8)
          end
        end
      end
      for i = 1, #fields, CHUNK do
        guarded('HDEL', staged, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
      end
    end
    redis.call('LTRIM', KEYS[1], ARGV[1], '-1') -- n, as it came: see BELL_TTL
    return 1
  end
end
return 0
