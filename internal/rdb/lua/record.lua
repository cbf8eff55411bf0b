-- record.lua: write a batch that ended into the queue's history, and
-- forget it among its manager's published running batches; then keep the
-- history to its bounds.
-- KEYS[1] history hash   KEYS[2] history index (batch id -> ended, Redis ms)
-- KEYS[3] the manager's batches hash
-- ARGV[1] batch id   ARGV[2] its JSON record   ARGV[3] most batches kept
-- ARGV[4] oldest kept, ms
-- Returns 1.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now(), ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
trim_history(KEYS[1], KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
return 1
