-- worker_lost: the pool process running a batch died (SIGKILL, segfault, the OOM killer); Celery acknowledged
-- the message instead of redelivering it. Each task this batch still held comes back through admission:
-- a started one with attempt + 1 after delay_seconds (the dead process's requests drain at the site
-- meanwhile); a task whose batch has now killed its worker twice is dead-lettered with that reason, never
-- looped, and a started request not safe_to_repeat at once (unsafe_to_retry: it may have reached the site). A task of the batch not yet started goes back uncharged. Stale tokens change nothing.
-- A started task's place in `active` is held for delay_seconds more by a "drain:<task id>" member (no
-- message, so the reaper just drops it): the dead process's request may still be in flight at the site,
-- and max_active holds as the site sees it.
-- A started task that died beside other started tasks comes back with run_alone set: the distributor publishes it in
-- a message of its own and no batch takes it on beside others (take_queued.lua, admit.lua), so its next kill is its
-- own, and a page that died beside a poison page once does not die beside it again when both come back together.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] config   KEYS[7] intake   KEYS[8] dead_letters   KEYS[9] run_dead   KEYS[10] delayed
-- KEYS[11] leases   KEYS[12] worker_lost   KEYS[13] lent_places
-- ARGV[1] now (s) or ""   ARGV[2] delay_seconds (s)   ARGV[3] kills_allowed (count: dead-letter at this many)
-- ARGV[4] dead_letters_max (count)   ARGV[5..] leases (task id, token, task id, token, ...)
-- Returns {retried (count), returned (count), dead_entries...}
local now = now_or_server(ARGV[1])
local retries = tonumber(redis.call('HGET', KEYS[6], 'retries') or '3')
local kills_allowed = tonumber(ARGV[3])
local reply = {0, 0}
local retried, returned = 0, 0
local started = 0
for i = 5, #ARGV - 1, 2 do
  local held, state = holds(KEYS[11], ARGV[i], ARGV[i + 1])
  if held and state == 's' then started = started + 1 end
end
for i = 5, #ARGV - 1, 2 do
  local task_id, token = ARGV[i], ARGV[i + 1]
  local held, state = holds(KEYS[11], task_id, token)
  local raw = held and redis.call('HGET', KEYS[2], task_id) or nil
  if raw then
    drop_lease(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[13], task_id)
    redis.call('HDEL', KEYS[11], task_id)
    if state ~= 's' then
      redis.call('LPUSH', KEYS[7], raw)
      returned = returned + 1
    else
      redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), 'drain:' .. task_id)
      local kills = redis.call('HINCRBY', KEYS[12], task_id, 1)
      local message = cjson.decode(raw)
      local attempt = (tonumber(message['attempt']) or 0) + 1
      redis.call('HINCRBY', KEYS[5], 'failed', 1)
      redis.call('HINCRBY', KEYS[5], 'worker_lost', 1)
      local unsafe = unsafe_to_repeat(message)
      if kills >= kills_allowed or attempt > retries or unsafe then
        local reason = 'poison message: its batch killed its worker ' .. string.format('%d', kills) .. ' times'
        if unsafe then
          reason = UNSAFE_TO_RETRY .. ' (worker lost)'
          redis.call('HINCRBY', KEYS[5], 'unsafe_to_retry', 1)
        elseif kills < kills_allowed then
          reason = 'worker lost: the pool process died running the task (attempt ' .. string.format('%d', attempt)
            .. ' of ' .. string.format('%d', retries + 1) .. ')'
        end
        local entry = dead_entry(raw, reason, now)
        push_dead(KEYS[8], KEYS[5], KEYS[9], entry, message, tonumber(ARGV[4]))
        redis.call('HDEL', KEYS[12], task_id)
        reply[#reply + 1] = entry
      else
        message['attempt'] = attempt
        if started > 1 then message['run_alone'] = true end
        redis.call('ZADD', KEYS[10], now + tonumber(ARGV[2]), cjson.encode(message))
        redis.call('HINCRBY', KEYS[5], 'retried', 1)
        retried = retried + 1
      end
    end
  end
end
reply[1] = retried
reply[2] = returned
return reply
