-- limit.lua: set, clear or read a function's fleet-wide limit, and keep the
-- limit in force (what take.lua reads) in step with its sources.
-- A function's limit comes from its code (declared with its handle: its
-- managers and workers write it, "code\t<func>") or from an operator
-- (redmap limit, "op\t<func>"); the operator's wins while it is set, and
-- clearing it brings the code's back. A record is JSON with "limit", the
-- limit as take.lua reads it ("<rate> <per ms> <burst> <concurrency>").
-- A declaration that says what the code's record says already leaves it
-- (and who declared it first) as it is.
-- KEYS[1] the queue's limits (HASH, keys.Limits)   KEYS[2] their state
-- (HASH, keys.LimitState): a function's is reset when its limit changes
-- ARGV[1] "code" (declare), "op" (set), "clear" (drop the operator's), or
-- "read"   ARGV[2] the function   ARGV[3] the record (code, op)
-- ARGV[4] its limit (code, op)
-- A key holding foreign data is set aside (set_aside): the code's limits
-- are declared again by its managers and workers, an operator's is lost.
-- Returns the limit in force afterwards ("" if none) and the source it
-- comes from ("op", "code" or "").
local key, kind, fn = KEYS[1], ARGV[1], ARGV[2]

-- limit_in returns the "limit" of record v, or nil.
local function limit_in(v)
  local ok, r = pcall(cjson.decode, v or '')
  if ok and type(r) == 'table' and type(r.limit) == 'string' then
    return r.limit
  end
  return nil
end

if kind == 'code' then
  if limit_in(guarded('HGET', key, 'code\t' .. fn)) ~= ARGV[4] then
    redis.call('HSET', key, 'code\t' .. fn, ARGV[3])
  end
elseif kind == 'op' then
  guarded('HSET', key, 'op\t' .. fn, ARGV[3])
elseif kind == 'clear' then
  guarded('HDEL', key, 'op\t' .. fn)
end
local src, v = 'op', limit_in(guarded('HGET', key, 'op\t' .. fn))
if not v then
  src, v = 'code', limit_in(redis.call('HGET', key, 'code\t' .. fn))
end
if not v then
  src, v = '', ''
end
if kind ~= 'read' and redis.call('HGET', key, fn) ~= (v ~= '' and v or false) then
  if v == '' then
    redis.call('HDEL', key, fn)
  else
    redis.call('HSET', key, fn, v)
  end
  -- A new limit starts from a full bucket: an arrival time of the old
  -- one (an hour a token) would hold the new one (100 a second) back.
  guarded('HDEL', KEYS[2], fn)
end
return {v, src}
