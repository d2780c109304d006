-- hand_back: a batch whose refill time is over has only slow pages left in flight (each lent its place:
-- lend_places.lua), safe to send again. Rather than hold its worker process for their timeouts (two processes
-- waiting so stopped a broad source for 10 s), it cancels them and hands their tasks back: each task held under
-- its token and started goes back to the front of intake with the same attempt (nothing is known of its outcome,
-- so nothing is charged), its lease, host place and lent place freed. A task no longer held is left alone.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] intake   KEYS[7] leases   KEYS[8] worker_lost   KEYS[9] lent_places
-- ARGV[1..] leases (task id, token, task id, token, ...; no times: handing back needs no clock)
-- Returns handed_back: the number of tasks put back in intake.
local handed_back = 0
for i = 1, #ARGV - 1, 2 do
  local task_id, token = ARGV[i], ARGV[i + 1]
  local held, state = holds(KEYS[7], task_id, token)
  if held and state == 's' then
    redis.call('HDEL', KEYS[8], task_id)
    handed_back = handed_back + return_to_intake(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[9], KEYS[7], KEYS[6], task_id)
  end
end
if handed_back > 0 then redis.call('HINCRBY', KEYS[5], 'handed_back', handed_back) end
return handed_back
