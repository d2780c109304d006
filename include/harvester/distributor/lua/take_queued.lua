-- take_queued: a running batch that has room takes on tasks of its source that were admitted and published but
-- not started yet (their Celery message still waits for a worker process): each is started now under a fresh
-- fencing token, so its lease is this batch's. Admission already counted them (max_active, the host's places),
-- so nothing is charged again; their message, when a worker process gets it, meets a token that no longer holds
-- and is dropped at start.lua (stale_deliveries): the task runs once. Queued reservations are the active entries
-- whose deadline lies past any started lease's (queued_lease_seconds > lease_seconds), oldest published first;
-- each one's state is checked as well. A task that must run alone (run_alone, worker_lost.lua) is left to its own
-- message.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] leases   KEYS[4] counters
-- ARGV[1] wanted (count of tasks)   ARGV[2] lease_seconds (s)   ARGV[3] now (s) or ""
-- Returns {first_token (count: message i has token first_token + i - 1), messages... (the tasks now started)}
local now = now_or_server(ARGV[3])
local wanted = tonumber(ARGV[1])
if wanted <= 0 then return {0} end
local lease_seconds = tonumber(ARGV[2])
local candidates = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.6f', now + lease_seconds), '+inf',
  'LIMIT', 0, wanted * 2 + 16)
local taken, raws = {}, {}
for _, task_id in ipairs(candidates) do
  if #taken >= wanted then break end
  local state = lease_of(KEYS[3], task_id)
  local raw = redis.call('HGET', KEYS[2], task_id)
  if state == 'q' and raw and not runs_alone(raw) then
    taken[#taken + 1] = task_id
    raws[#raws + 1] = raw
  end
end
if #taken == 0 then return {0} end
local first_token = redis.call('HINCRBY', KEYS[4], 'leases', #taken) - #taken + 1
local deadline = now + lease_seconds
for i, task_id in ipairs(taken) do
  redis.call('HSET', KEYS[3], task_id, 's|' .. string.format('%d', first_token + i - 1))
  redis.call('ZADD', KEYS[1], deadline, task_id)
end
redis.call('HINCRBY', KEYS[4], 'started', #taken)
redis.call('HINCRBY', KEYS[4], 'taken_over', #taken)
local reply = {first_token}
for _, raw in ipairs(raws) do reply[#reply + 1] = raw end
return reply
