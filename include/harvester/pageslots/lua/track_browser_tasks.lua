-- track_browser_tasks: the allocator's bookkeeping of recent browser tasks (pending -> running -> completed).
-- The distributor's hand-off (harvester.pageslots.handoff) adds each admitted task as pending with the server
-- time; a slot marks it running (slot_begin_task) and completed; only the most recent ARGV[1] admitted tasks
-- are kept (the seed's sample of 3000).
-- KEYS[1] recent_tasks (zset member -> admitted at, s)
-- KEYS[2] recent_task_states (hash member -> "country|state|admitted at")
-- ARGV[1] sample_size (count)   ARGV[2] state: pending | running | completed
-- ARGV[3..] entries: pending: member, country pairs; running/completed: members
-- Returns recorded: the number of tasks whose state was recorded.
local recent, states = KEYS[1], KEYS[2]
local sample, state = tonumber(ARGV[1]), ARGV[2]
local now = server_now()
local recorded = 0
if state == 'pending' then
  for i = 3, #ARGV, 2 do
    redis.call('ZADD', recent, now, ARGV[i])
    redis.call('HSET', states, ARGV[i], ARGV[i + 1] .. '|pending|' .. fmt(now))
    recorded = recorded + 1
  end
  local excess = redis.call('ZCARD', recent) - sample
  if excess > 0 then
    local oldest = redis.call('ZRANGE', recent, 0, excess - 1)
    redis.call('HDEL', states, unpack(oldest))
    redis.call('ZREMRANGEBYRANK', recent, 0, excess - 1)
  end
else
  for i = 3, #ARGV do
    local entry = redis.call('HGET', states, ARGV[i])
    if entry then
      local country, _, admitted = string.match(entry, '^([^|]*)|([^|]*)|(.*)$')
      redis.call('HSET', states, ARGV[i], country .. '|' .. state .. '|' .. admitted)
      recorded = recorded + 1
    end
  end
end
return recorded
