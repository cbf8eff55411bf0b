-- retract.lua: withdraw tasks of a durable batch's owner (RDB.Cancel):
-- remove them and their payloads from its task set, and their attempt
-- counts and marks of a copy (COPIED), unless the owner's claim is no longer the batch's fence (another
-- manager took the batch over, and the tasks are its: see keys.Fence).
-- KEYS[1] the task set   KEYS[2] its attempt counts   KEYS[3] the batch's fence
-- ARGV[1] the claim the owner holds (redisbroker.Fence)   ARGV[2..] the task ids
-- A key holding foreign data is set aside (set_aside), but the task set:
-- left to its owner, which fails its tasks naming it.
-- Returns nothing; the error "FENCED <the fence>" if fenced.
local fence = fence_check(KEYS[3], ARGV[1])
if fence then
  return redis.error_reply('FENCED ' .. fence)
end
for i = 2, #ARGV, CHUNK do
  local last = math.min(i + CHUNK - 1, #ARGV)
  unless_foreign('HDEL', KEYS[1], unpack(ARGV, i, last))
  guarded('HDEL', KEYS[2], unpack(ARGV, i, last))
  local marks = {}
  for j = i, last do
    marks[#marks + 1] = COPIED .. ARGV[j]
  end
  guarded('HDEL', KEYS[2], unpack(marks))
end
return 0
