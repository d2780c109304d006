-- heartbeat: extend the leases a worker still holds (started, matching token); a stale holder extends
-- nothing and is counted.
-- KEYS[1] active   KEYS[2] leases   KEYS[3] counters
-- ARGV[1] lease_seconds (s)   ARGV[2] now (s) or "" for server TIME   ARGV[3..] leases (task id, token, ...)
-- Returns {held... (task ids whose leases were extended: the ones the caller still holds)}
local deadline = now_or_server(ARGV[2]) + tonumber(ARGV[1])
local held_ids, stale = {}, 0
for i = 3, #ARGV - 1, 2 do
  local held, state = holds(KEYS[2], ARGV[i], ARGV[i + 1])
  if held and state == 's' then
    redis.call('ZADD', KEYS[1], deadline, ARGV[i])
    held_ids[#held_ids + 1] = ARGV[i]
  else
    stale = stale + 1
  end
end
if stale > 0 then redis.call('HINCRBY', KEYS[3], 'stale', stale) end
return held_ids
