-- Shared helpers, prepended to every script of this folder when it is registered (see scripts.py).
-- Units: every time is seconds since the Unix epoch as a float; every duration is seconds.

local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- ARGV "" means "use the Redis server clock", so every machine agrees on one clock.
local function now_or_server(value)
  if value == nil or value == '' then return server_now() end
  return tonumber(value)
end

-- The host (host[:port], lower case, no user info) of a URL; Python's distributor.hosts.host_of matches it.
local function host_of(url)
  if type(url) ~= 'string' then return '' end
  local authority = string.match(url, '^[%a][%w+.-]*://([^/?#]*)')
  if not authority then return '' end
  local at = string.find(authority, '@[^@]*$')
  if at then authority = string.sub(authority, at + 1) end
  return string.lower(authority)
end

-- Release one lease: remove the task from active, its message, its host count and its lent place (a slow request's
-- place lent back to the source: lend_places.lua). 1 if it was active.
local function drop_lease(active, active_messages, active_hosts, host_counts, lent_places, task_id)
  if redis.call('ZREM', active, task_id) == 0 then return 0 end
  redis.call('ZREM', lent_places, task_id)
  redis.call('HDEL', active_messages, task_id)
  local host = redis.call('HGET', active_hosts, task_id)
  if host then
    redis.call('HDEL', active_hosts, task_id)
    if redis.call('HINCRBY', host_counts, host, -1) <= 0 then redis.call('HDEL', host_counts, host) end
  end
  return 1
end

-- Put a held task back at the front of intake with the same attempt (it never ran, or its request was cancelled
-- unanswered): its lease, host place and lent place go. 1 if its message went back.
local function return_to_intake(active, active_messages, active_hosts, host_counts, lent_places, leases, intake,
                                task_id)
  local raw = redis.call('HGET', active_messages, task_id)
  drop_lease(active, active_messages, active_hosts, host_counts, lent_places, task_id)
  redis.call('HDEL', leases, task_id)
  if not raw then return 0 end
  redis.call('LPUSH', intake, raw)
  return 1
end

-- Move retries whose backoff is over from the delayed set to the front of intake (they are older work).
local function promote_due(delayed, intake, now, limit)
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  if #due == 0 then return 0 end
  for i = #due, 1, -1 do redis.call('LPUSH', intake, due[i]) end
  redis.call('ZREM', delayed, unpack(due))
  return #due
end

-- The lease record of a task: its state ('a' admitted, 'q' queued in Celery, 's' started by a worker) and
-- its fencing token, or nil when the task holds no lease.
local function lease_of(leases, task_id)
  local value = redis.call('HGET', leases, task_id)
  if not value then return nil, nil end
  return string.sub(value, 1, 1), string.sub(value, 3)
end

-- True when task_id is held under exactly this token (a stale holder's token never matches again).
local function holds(leases, task_id, token)
  local state, current = lease_of(leases, task_id)
  return state ~= nil and current == token, state
end

-- Whether a task's JSON asks to run in a batch of its own (TaskMessage.run_alone, set by worker_lost.lua): a plain
-- find, no decode (pydantic and cjson both write the pair without spaces).
local function runs_alone(raw)
  return string.find(raw, '"run_alone":true', 1, true) ~= nil
end

-- A dead-letter entry {message, reason, failed_at}; message is the original JSON (or a JSON string if malformed).
local function dead_entry(raw_message_json, reason, now)
  return '{"message":' .. raw_message_json .. ',"reason":' .. cjson.encode(reason)
    .. ',"failed_at":' .. string.format('%.6f', now) .. '}'
end

local function count_dead_for_run(run_dead, message, by)
  if type(message) ~= 'table' then return end
  local run_id = message['run_id']
  if type(run_id) ~= 'string' then return end
  by = by or 1
  local left = redis.call('HINCRBY', run_dead, run_id, by)
  if left <= 0 then redis.call('HDEL', run_dead, run_id) end
  local package_id = message['package_id']
  if type(package_id) == 'number' then
    local field = run_id .. '|' .. string.format('%d', package_id)
    if redis.call('HINCRBY', run_dead, field, by) <= 0 then redis.call('HDEL', run_dead, field) end
  end
end

-- Append a dead letter; past cap entries the oldest go (their runs' counts with them), counted as overflow.
local function push_dead(dead, counters, run_dead, entry, message, cap)
  redis.call('RPUSH', dead, entry)
  redis.call('HINCRBY', counters, 'dead', 1)
  count_dead_for_run(run_dead, message)
  local over = redis.call('LLEN', dead) - cap
  while over > 0 do
    local oldest = redis.call('LPOP', dead)
    if not oldest then break end
    local ok, old_entry = pcall(cjson.decode, oldest)
    if ok and type(old_entry) == 'table' then count_dead_for_run(run_dead, old_entry['message'], -1) end
    redis.call('HINCRBY', counters, 'dead_overflow', 1)
    over = over - 1
  end
end

-- True when a task message carries a request its source marked not safe_to_repeat (a POST that may change
-- something): once a worker started it, nobody knows whether the site received it, so it is never sent again
-- by a reap or a lost worker (harvester.config.HttpRequest.safe_to_repeat); it is dead-lettered instead.
local function unsafe_to_repeat(message)
  if type(message) ~= 'table' then return false end
  local request = message['request']
  return type(request) == 'table' and request['safe_to_repeat'] == false
end

local UNSAFE_TO_RETRY = 'unsafe_to_retry: the request is not safe_to_repeat and its worker was lost after it started, '
  .. 'so the site may have received it; not sent again (requeue the dead letter to send it on purpose)'
