-- admit: atomically admit up to ARGV[1] tasks of ONE source from its intake, reserving capacity for them.
-- A task is admitted only while   active < max_active   AND   fetch starts in the rolling window < per_minute
-- (and, when per_host_max_active is set, its host has fewer tasks in flight; a paused host waits).
-- An admitted task RESERVES a place in active (it counts against max_active) under a fresh fencing token;
-- its lease starts only when a worker starts it (start.lua). Until the distributor confirms it published the
-- task (mark_published.lua) the reservation lasts publish_grace_seconds, after which reap.lua puts the task
-- back in intake uncharged. Workers take the per_minute tokens when they fetch (acquire_fetch.lua).
-- Every popped message is classified (malformed, duplicate, host-blocked, admitted) before anything is
-- written, and nothing is unpacked in bulk, so a large batch cannot fail half way.
--
-- KEYS[1]  intake            list of JSON task messages (due retries are already at its front: promote_due.lua)
-- KEYS[2]  active            zset task id -> reservation or lease deadline (s)
-- KEYS[3]  active_messages   hash task id -> message
-- KEYS[4]  active_hosts      hash task id -> host
-- KEYS[5]  host_active_counts  hash host -> tasks in flight
-- KEYS[6]  host_paused       hash host -> paused until (s)
-- KEYS[7]  window            zset fetch sequence number -> fetch start time (s)
-- KEYS[8]  paused_until      string: the whole source waits until this time (s)
-- KEYS[9]  counters          hash of running totals
-- KEYS[10] config            hash max_active, per_minute, per_host_max_active, retries
-- KEYS[11] dead_letters      list of JSON {message, reason, failed_at}
-- KEYS[12] leases            hash task id -> "<state>|<token>"
-- KEYS[13] run_dead          hash run id (and "run|package") -> tasks of that run in dead letters
-- ARGV[1] wanted (count of tasks)   ARGV[2] publish_grace_seconds (s)
-- ARGV[3] window_seconds (s, the rate window plus the margin)   ARGV[4] now (s) or "" for server TIME
-- ARGV[5] expected_source (a message naming another source is malformed)
-- ARGV[6] dead_letters_max (count kept per source)
-- Returns {status, wait_seconds (s, "-1" = none known: for "empty", the caller knows the next retry due),
--          pending (intake length), malformed (count), now (s), active (after the call),
--          first_token (count: message i has token first_token + i - 1), messages... (the admitted messages)}
-- status: ok | empty | active_limit | rate_limit | paused | unregistered | host_limit

local intake, active, active_messages, active_hosts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local host_counts, host_paused, window, paused_until = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local counters, config, dead, leases, run_dead = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local wanted = tonumber(ARGV[1])
local publish_grace = tonumber(ARGV[2])
local dead_cap = tonumber(ARGV[6])
local window_seconds = tonumber(ARGV[3])
local now = now_or_server(ARGV[4])
local source = ARGV[5]

local function answer(status, wait, malformed, admitted, first_token)
  local reply = {status, wait, redis.call('LLEN', intake), malformed, string.format('%.6f', now),
    redis.call('ZCARD', active), first_token or 0}
  if admitted then for i = 1, #admitted do reply[#reply + 1] = admitted[i] end end
  return reply
end

local limits = redis.call('HMGET', config, 'max_active', 'per_minute', 'per_host_max_active')
local max_active, per_minute = tonumber(limits[1]), tonumber(limits[2])
local per_host = tonumber(limits[3]) or 0
if not max_active or not per_minute then return answer('unregistered', '-1', 0) end

if wanted <= 0 then return answer('ok', '0', 0) end

local paused = tonumber(redis.call('GET', paused_until) or '0')
if paused > now then return answer('paused', string.format('%.6f', paused - now), 0) end

redis.call('ZREMRANGEBYSCORE', window, '-inf', now - window_seconds)
local rate_room = per_minute - redis.call('ZCARD', window)
if rate_room <= 0 then
  local oldest = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
  return answer('rate_limit', string.format('%.6f', math.max(0, tonumber(oldest[2]) + window_seconds - now)), 0)
end
local active_room = max_active - redis.call('ZCARD', active)
if active_room <= 0 then
  local first = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
  return answer('active_limit', string.format('%.6f', math.max(0, tonumber(first[2]) - now)), 0)
end

local room = math.min(wanted, rate_room, active_room)
if redis.call('LLEN', intake) == 0 then return answer('empty', '-1', 0) end

-- Per-host checks cost a URL parse per task; do them only when a host limit or a host pause exists.
local check_hosts = per_host > 0 or redis.call('HLEN', host_paused) > 0
local host_pauses = {}
local function host_paused_until(host)
  local until_time = host_pauses[host]
  if until_time == nil then
    until_time = tonumber(redis.call('HGET', host_paused, host) or '0')
    if until_time > 0 and until_time <= now then redis.call('HDEL', host_paused, host) end
    host_pauses[host] = until_time
  end
  return until_time
end
local host_taken = {}

local admitted, admitted_ids = {}, {}
local rotated = {}
local malformed = 0
local scanned = 0
local scan_limit = room * 4 + 16  -- tasks of a blocked host are rotated behind the others, but not forever
local deadline = now + publish_grace  -- the distributor confirms it published within it
local host_wait = nil

local admitted_hosts, admitted_task_ids = {}, {}
local problems = {}
while #admitted < room and scanned < scan_limit do
  local batch = redis.call('LPOP', intake, math.min(room - #admitted, scan_limit - scanned))
  if not batch then break end
  for _, raw in ipairs(batch) do
    scanned = scanned + 1
    local ok, message = pcall(cjson.decode, raw)
    local problem = nil
    if not ok or type(message) ~= 'table' then
      problem = 'malformed message: not a JSON object'
    elseif type(message['task_id']) ~= 'string' or message['task_id'] == '' then
      problem = 'malformed message: task_id missing'
    elseif type(message['url']) ~= 'string' then
      problem = 'malformed message: url missing'
    elseif message['source'] ~= source then
      problem = 'malformed message: source is not ' .. source
    end
    if problem then
      problems[#problems + 1] = {raw, problem}
    else
      local task_id = message['task_id']
      local host = nil
      local admit_it = true
      if redis.call('ZSCORE', active, task_id) or admitted_ids[task_id] then
        -- the same task is already in flight: a duplicate push; the running copy will store it
        redis.call('HINCRBY', counters, 'duplicates', 1)
        admit_it = false
      elseif check_hosts then
        host = host_of(message['url'])
        local host_until = host_paused_until(host)
        if host_until > now then
          admit_it = false
          host_wait = math.min(host_wait or math.huge, host_until - now)
          rotated[#rotated + 1] = raw
        elseif per_host > 0 then
          if host_taken[host] == nil then host_taken[host] = tonumber(redis.call('HGET', host_counts, host) or '0') end
          if host_taken[host] >= per_host then
            admit_it = false
            rotated[#rotated + 1] = raw
          else
            host_taken[host] = host_taken[host] + 1
          end
        end
      end
      if admit_it then
        admitted_ids[task_id] = true
        admitted[#admitted + 1] = raw
        admitted_hosts[#admitted] = (host and per_host > 0) and host or false
        admitted_task_ids[#admitted] = task_id
      end
    end
  end
end

-- Everything is decided: now write (one command per task, never a bulk unpack).
for _, item in ipairs(problems) do
  push_dead(dead, counters, run_dead, dead_entry(cjson.encode(item[1]), item[2], now), nil, dead_cap)
  redis.call('HINCRBY', counters, 'malformed', 1)
  malformed = malformed + 1
end
local first_token = 0
if #admitted > 0 then
  first_token = redis.call('HINCRBY', counters, 'leases', #admitted) - #admitted + 1
  redis.call('HINCRBY', counters, 'admitted', #admitted)
end
for i, raw in ipairs(admitted) do
  local task_id = admitted_task_ids[i]
  redis.call('ZADD', active, deadline, task_id)
  redis.call('HSET', active_messages, task_id, raw)
  redis.call('HSET', leases, task_id, 'a|' .. string.format('%d', first_token + i - 1))
  local host = admitted_hosts[i]
  if host then
    redis.call('HSET', active_hosts, task_id, host)
    redis.call('HINCRBY', host_counts, host, 1)
  end
end

for i = 1, #rotated do redis.call('RPUSH', intake, rotated[i]) end

if #admitted == 0 then
  if #rotated > 0 then
    if host_wait then return answer('host_limit', string.format('%.6f', host_wait), malformed) end
    return answer('host_limit', '-1', malformed)
  end
  return answer('empty', '-1', malformed)
end

return answer('ok', '0', malformed, admitted, first_token)
