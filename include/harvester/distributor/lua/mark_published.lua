-- mark_published: the distributor sent these admitted tasks to Celery; their reservations now last
-- queued_lease_seconds (a message may wait long in a busy queue: that is not dying). A task reserved
-- under another token (its reservation expired and it was admitted again) is left alone.
-- KEYS[1] active   KEYS[2] leases
-- ARGV[1] queued_lease_seconds (s)   ARGV[2] now (s) or ""   ARGV[3..] leases (task id, token, task id, token, ...)
-- Returns marked: the number of reservations confirmed.
local now = now_or_server(ARGV[2])
local deadline = now + tonumber(ARGV[1])
local marked = 0
for i = 3, #ARGV - 1, 2 do
  local task_id, token = ARGV[i], ARGV[i + 1]
  local held, state = holds(KEYS[2], task_id, token)
  if held and state == 'a' then
    redis.call('HSET', KEYS[2], task_id, 'q|' .. token)
    redis.call('ZADD', KEYS[1], deadline, task_id)
    marked = marked + 1
  end
end
return marked
