-- return_lost: queued reservations whose Celery message is in neither its queue nor kombu's unacked set (the
-- distributor saw them missing twice: the message was lost between kombu's BRPOP and its unacked registration,
-- celery/celery#4354) go back to intake with the same attempt: they never ran. A task no longer queued under
-- that token (started, released, or admitted again under another) is left alone.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] intake   KEYS[7] leases   KEYS[8] lent_places
-- ARGV[1..] leases (task id, token, task id, token, ...)
-- Returns returned: the number of reservations put back in intake.
local returned = 0
for i = 1, #ARGV - 1, 2 do
  local task_id, token = ARGV[i], ARGV[i + 1]
  local held, state = holds(KEYS[7], task_id, token)
  if held and state == 'q' then
    returned = returned + return_to_intake(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[8], KEYS[7], KEYS[6], task_id)
  end
end
if returned > 0 then redis.call('HINCRBY', KEYS[5], 'returned_lost_message', returned) end
return returned
