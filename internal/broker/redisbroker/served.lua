-- served.lua: say, for what some batches call, whether a live worker of the
-- queue can run them (as the workers' heartbeats publish what they serve), by
-- the Redis clock.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2], ...: what a batch calls: "<func>\t<signature>", and
-- "\n<reducer>\t<signature>" for a MapReduce (a lane's calls, see submit.lua)
-- Returns a pair per batch, in order: 3 and "" if some live worker registered
-- all it calls with the same signatures; 0 and "" if no worker is live;
-- else, for the first handle no live worker registered so: 2 and
-- "<name>\t<the other signature>" if one registered the name with another
-- signature, or 1 and "<name>" if none registered it at all. A workers set
-- holding foreign data is read as empty (the heartbeats write it again).
-- Last comes the shard's pause mark (keys.Paused: an operator paused the
-- queue), or false if it runs.
local base = ARGV[1]
local workers = {} -- per live worker: its set of "<name>\t<signature>"
local names = {}   -- name -> a signature some live worker registered it with
for _, wid in ipairs(unless_foreign('ZRANGEBYSCORE', KEYS[1], '(' .. now(), '+inf') or {}) do
  local set = {}
  -- an info hash holding foreign data says nothing: that worker's next
  -- heartbeat sets it aside and writes it again
  local serves = unless_foreign('HGET', base .. 'w:' .. wid .. ':info', 'serves')
  if serves then
    for entry in string.gmatch(serves, '[^\n]+') do
      set[entry] = true
      local name, sig = string.match(entry, '^([^\t]*)\t(.*)$')
      if name then
        names[name] = sig
      end
    end
  end
  workers[#workers + 1] = set
end
local out = {}
for i = 2, #ARGV do
  local parts = {}
  for part in string.gmatch(ARGV[i], '[^\n]+') do
    parts[#parts + 1] = part
  end
  local code, detail = 0, ''
  if #workers > 0 then
    for _, set in ipairs(workers) do
      local all = true
      for _, part in ipairs(parts) do
        all = all and set[part] == true
      end
      if all then
        code = 3
        break
      end
    end
    if code ~= 3 then
      for _, part in ipairs(parts) do
        local name = string.match(part, '^([^\t]*)')
        local any = false
        for _, set in ipairs(workers) do
          any = any or set[part] == true
        end
        if not any then
          if names[name] then
            code, detail = 2, name .. '\t' .. names[name]
          else
            code, detail = 1, name
          end
          break
        end
      end
      if code == 0 then
        -- Each part is served, by different workers: none runs the batch.
        code, detail = 1, string.match(parts[#parts], '^([^\t]*)')
      end
    end
  end
  out[#out + 1] = code
  out[#out + 1] = detail
end
out[#out + 1] = redis.call('GET', base .. 'paused')
return out
