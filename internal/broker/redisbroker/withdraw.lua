-- withdraw.lua: withdraw the tasks of managers found lost from one shard of
-- their queue other than the first (lost.lua withdraws them from the first,
-- in the step that records them lost): see withdraw_manager.
-- KEYS[1] the shard's workers sorted set (names the shard's slot)
-- ARGV[1] the shard's key base "<prefix>:{<shard>}:"   ARGV[2], ...: manager ids
-- Returns nothing.
for i = 2, #ARGV do
  withdraw_manager(ARGV[1], ARGV[i])
end
return 0
