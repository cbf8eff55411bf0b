-- unrecord.lua: an operator's cancel takes a durable pipeline's record, to
-- delete what it names, unless a manager holds the pipeline's claim.
-- KEYS[1] the pipeline's claim (keys.Claim)
-- KEYS[2] the pipeline's record (STRING; keys.Pipeline)
-- A record holding foreign data is set aside (set_aside).
-- Returns {"held"} if a manager holds the claim (nothing done), else
-- {"deleted", the record} once it is deleted, or {"none"} if there is none.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'held'}
end
local rec = guarded('GET', KEYS[2])
if not rec then
  return {'none'}
end
redis.call('DEL', KEYS[2])
return {'deleted', rec}
