-- release: tasks are done (their output is stored); free their leases and count them done.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- ARGV[1..] task_ids (no times: releasing needs no clock)
-- Returns released: the number of leases released (a lease already reaped is not counted twice).
local released = 0
for i = 1, #ARGV do
  released = released + drop_lease(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[i])
end
if released > 0 then redis.call('HINCRBY', KEYS[5], 'done', released) end
return released
