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

-- Release one lease: remove the task from active, its message and its host count. 1 if it was active.
local function drop_lease(active, active_messages, active_hosts, host_counts, task_id)
  if redis.call('ZREM', active, task_id) == 0 then return 0 end
  redis.call('HDEL', active_messages, task_id)
  local host = redis.call('HGET', active_hosts, task_id)
  if host then
    redis.call('HDEL', active_hosts, task_id)
    if redis.call('HINCRBY', host_counts, host, -1) <= 0 then redis.call('HDEL', host_counts, host) end
  end
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

-- A dead-letter entry {message, reason, failed_at}; message is the original JSON (or a JSON string if malformed).
local function dead_entry(raw_message_json, reason, now)
  return '{"message":' .. raw_message_json .. ',"reason":' .. cjson.encode(reason)
    .. ',"failed_at":' .. string.format('%.6f', now) .. '}'
end

local function count_dead_for_run(run_dead, message)
  if type(message) ~= 'table' then return end
  local run_id = message['run_id']
  if type(run_id) ~= 'string' then return end
  redis.call('HINCRBY', run_dead, run_id, 1)
  local package_id = message['package_id']
  if type(package_id) == 'number' then
    redis.call('HINCRBY', run_dead, run_id .. '|' .. string.format('%d', package_id), 1)
  end
end
