-- start: a worker's first act on a batch. Each task still reserved under the message's token (admitted
-- or queued) is started: its lease begins now. The worker fetches only the tasks it then holds.
-- A task no longer reserved under that token (reaped and admitted again, released, or already started
-- by another delivery of the same message) is a stale delivery: dropped and counted, never fetched.
-- KEYS[1] active   KEYS[2] leases   KEYS[3] counters
-- ARGV[1] lease_seconds (s)   ARGV[2] now (s) or ""   ARGV[3..] leases (task id, token, task id, token, ...)
-- Returns {held... (task ids now started by this worker)}
local now = now_or_server(ARGV[2])
local deadline = now + tonumber(ARGV[1])
local held_ids = {}
local stale = 0
for i = 3, #ARGV - 1, 2 do
  local task_id, token = ARGV[i], ARGV[i + 1]
  local held, state = holds(KEYS[2], task_id, token)
  if held and (state == 'a' or state == 'q') then
    redis.call('HSET', KEYS[2], task_id, 's|' .. token)
    redis.call('ZADD', KEYS[1], deadline, task_id)
    held_ids[#held_ids + 1] = task_id
  else
    stale = stale + 1
  end
end
if #held_ids > 0 then redis.call('HINCRBY', KEYS[3], 'started', #held_ids) end
if stale > 0 then redis.call('HINCRBY', KEYS[3], 'stale_deliveries', stale) end
return held_ids
