-- heartbeat: extend the leases of tasks still held; a lease already reaped stays gone.
-- KEYS[1] active (zset task id -> lease deadline, s)
-- ARGV[1] lease_seconds (s)   ARGV[2] now (s) or "" for server TIME   ARGV[3..] task_ids
-- Returns extended: the number of leases extended.
local active = KEYS[1]
local deadline = now_or_server(ARGV[2]) + tonumber(ARGV[1])
local extended = 0
for i = 3, #ARGV do
  if redis.call('ZSCORE', active, ARGV[i]) then
    redis.call('ZADD', active, deadline, ARGV[i])
    extended = extended + 1
  end
end
return extended
