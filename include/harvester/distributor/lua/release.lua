-- release: tasks are done (their output is stored and their packages counted down); free the leases the
-- caller still holds (compare and delete on the fencing token) and count them done. A stale holder's
-- late release frees nothing (the task's new holder keeps its lease) and is counted.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] leases   KEYS[7] worker_lost   KEYS[8] lent_places
-- ARGV[1..] leases (task id, token, task id, token, ...; no times: releasing needs no clock)
-- Returns released: the number of leases released.
local released, stale = 0, 0
for i = 1, #ARGV - 1, 2 do
  if holds(KEYS[6], ARGV[i], ARGV[i + 1]) then
    released = released + drop_lease(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[8], ARGV[i])
    redis.call('HDEL', KEYS[6], ARGV[i])
    redis.call('HDEL', KEYS[7], ARGV[i])
  else
    stale = stale + 1
  end
end
if released > 0 then redis.call('HINCRBY', KEYS[5], 'done', released) end
if stale > 0 then redis.call('HINCRBY', KEYS[5], 'stale', stale) end
return released
