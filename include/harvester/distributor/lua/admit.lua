-- admit: atomically admit up to ARGV[1] tasks of ONE source from its intake, reserving capacity for them.
-- A task is admitted only while   active < max_active   AND   fetch starts in the rolling window < per_minute
-- AND its host can take it now: not paused, fewer than per_host_max_active of its tasks in flight, and its
-- last admission at least window / per_host_per_minute ago (so no task is admitted only to sleep for its host).
-- A task whose host cannot take it moves to that host's own queue (host_queue_prefix .. host), never back to
-- intake: a scan never meets it twice, so an intake ordered host by host drains. Hosts with queued tasks wait
-- in host_ready by the time each may take its next task, and are served in that order: round-robin.
-- An admitted task RESERVES a place in active (it counts against max_active, until a slow request lends it back:
-- lend_places.lua) under a fresh fencing token;
-- its lease starts only when a worker starts it (start.lua). Until the distributor confirms it published the
-- task (mark_published.lua) the reservation lasts publish_grace_seconds, after which reap.lua puts the task
-- back in intake uncharged. Workers take the per_minute tokens when they fetch (acquire_fetch.lua).
-- Every popped message is classified (malformed, duplicate, parked, admitted) before anything is
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
-- KEYS[10] config            hash max_active, per_minute, per_host_max_active, per_host_per_minute, retries
-- KEYS[11] dead_letters      list of JSON {message, reason, failed_at}
-- KEYS[12] leases            hash task id -> "<state>|<token>"
-- KEYS[13] run_dead          hash run id (and "run|package") -> tasks of that run in dead letters
-- KEYS[14] host_ready        zset host with queued tasks -> time its next task may be admitted (s)
-- KEYS[15] host_parked       string: tasks in the hosts' queues (count)
-- KEYS[16] host_next_admission  zset host -> earliest time its next task may be admitted (s)
-- KEYS[17] lent_places       zset task id -> time a slow request lent its place back (s): not counted in max_active
-- ARGV[1] wanted (count of tasks)   ARGV[2] publish_grace_seconds (s)
-- ARGV[3] window_seconds (s, the rate window plus the margin)   ARGV[4] now (s) or "" for server TIME
-- ARGV[5] expected_source (a message naming another source is malformed)
-- ARGV[6] dead_letters_max (count kept per source)
-- ARGV[7] host_queue_prefix (a host's queue key is this prefix .. host; same hash slot as the KEYS)
-- ARGV[8] park_limit (count of intake tasks a call may move to their hosts' queues beyond its scan)
-- ARGV[9] beside_others ("1": the caller runs what it admits beside tasks it holds (a batch's refill), so a task that
--         must run alone (run_alone, worker_lost.lua) is left where it is for the distributor; "0": the distributor)
-- Returns {status, wait_seconds (s, "-1" = none known: for "empty", the caller knows the next retry due;
--          for "ok", when the next queued host may take a task),
--          pending (intake length plus queued tasks), malformed (count), now (s), active (after the call),
--          first_token (count: message i has token first_token + i - 1), messages... (the admitted messages)}
-- status: ok | empty | active_limit | rate_limit | paused | unregistered | host_limit

local intake, active, active_messages, active_hosts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local host_counts, host_paused, window, paused_until = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local counters, config, dead, leases, run_dead = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local host_ready, host_parked, host_next, lent_places = KEYS[14], KEYS[15], KEYS[16], KEYS[17]
local wanted = tonumber(ARGV[1])
local publish_grace = tonumber(ARGV[2])
local dead_cap = tonumber(ARGV[6])
local window_seconds = tonumber(ARGV[3])
local now = now_or_server(ARGV[4])
local source = ARGV[5]
local host_queue_prefix = ARGV[7]
local park_limit = tonumber(ARGV[8])
local beside_others = ARGV[9] == '1'

local function pending()
  return redis.call('LLEN', intake) + tonumber(redis.call('GET', host_parked) or '0')
end

local function answer(status, wait, malformed, admitted, first_token)
  local reply = {status, wait, pending(), malformed, string.format('%.6f', now),
    redis.call('ZCARD', active), first_token or 0}
  if admitted then for i = 1, #admitted do reply[#reply + 1] = admitted[i] end end
  return reply
end

local limits = redis.call('HMGET', config, 'max_active', 'per_minute', 'per_host_max_active', 'per_host_per_minute')
local max_active, per_minute = tonumber(limits[1]), tonumber(limits[2])
local per_host = tonumber(limits[3]) or 0
local per_host_rate = tonumber(limits[4]) or 0
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
-- A slow request's place lent back (lend_places.lua) is room again: its host still counts it (per_host_max_active).
local active_room = max_active - redis.call('ZCARD', active) + redis.call('ZCARD', lent_places)
if active_room <= 0 then
  local first = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
  return answer('active_limit', string.format('%.6f', math.max(0, tonumber(first[2]) - now)), 0)
end

local room = math.min(wanted, rate_room, active_room)
local parked_total = tonumber(redis.call('GET', host_parked) or '0')
if redis.call('LLEN', intake) == 0 and parked_total == 0 then return answer('empty', '-1', 0) end

-- Host mode costs a URL parse per task: only for a source with host limits, a paused host or queued hosts.
local interval = 0
if per_host_rate > 0 then interval = window_seconds / per_host_rate end
local host_mode = per_host > 0 or interval > 0 or parked_total > 0 or redis.call('HLEN', host_paused) > 0
if host_mode then redis.call('ZREMRANGEBYSCORE', host_next, '-inf', now) end

local host_pauses, host_taken, host_spacing = {}, {}, {}
local function host_paused_until(host)
  local until_time = host_pauses[host]
  if until_time == nil then
    until_time = tonumber(redis.call('HGET', host_paused, host) or '0')
    if until_time > 0 and until_time <= now then redis.call('HDEL', host_paused, host) end
    host_pauses[host] = until_time
  end
  return until_time
end
-- nil when the host can take a task now; else when it may (now itself: when a release frees one of its places)
local function host_blocked_until(host)
  local paused_host = host_paused_until(host)
  if paused_host > now then return paused_host end
  if interval > 0 then
    if host_spacing[host] == nil then host_spacing[host] = tonumber(redis.call('ZSCORE', host_next, host) or '0') end
    if host_spacing[host] > now then return host_spacing[host] end
  end
  if per_host > 0 then
    if host_taken[host] == nil then host_taken[host] = tonumber(redis.call('HGET', host_counts, host) or '0') end
    if host_taken[host] >= per_host then return now end
  end
  return nil
end
local function host_takes_one(host)
  if per_host > 0 then host_taken[host] = (host_taken[host] or 0) + 1 end
  if interval > 0 then
    host_spacing[host] = now + interval
    redis.call('ZADD', host_next, now + interval, host)
  end
end

local admitted, admitted_ids = {}, {}
local admitted_hosts, admitted_task_ids = {}, {}
local problems = {}
local malformed = 0
local parked_delta = 0
local deadline = now + publish_grace  -- the distributor confirms it published within it

local function admit_task(raw, task_id, host)
  admitted_ids[task_id] = true
  admitted[#admitted + 1] = raw
  admitted_hosts[#admitted] = (host and per_host > 0) and host or false
  admitted_task_ids[#admitted] = task_id
  if host then host_takes_one(host) end
end
local function is_duplicate(task_id)
  if redis.call('ZSCORE', active, task_id) or admitted_ids[task_id] then
    -- the same task is already in flight: a duplicate push; the running copy will store it
    redis.call('HINCRBY', counters, 'duplicates', 1)
    return true
  end
  return false
end
local function park(raw, host, retry)
  local queue = host_queue_prefix .. host
  if retry then redis.call('LPUSH', queue, raw) else redis.call('RPUSH', queue, raw) end
  parked_delta = parked_delta + 1
  if not redis.call('ZSCORE', host_ready, host) then
    redis.call('ZADD', host_ready, host_blocked_until(host) or now, host)
  end
end

-- First the queued hosts whose time has come, longest waiting first. A host kept out only by its in-flight
-- places keeps its time (it is first when a place frees); there are at most as many as tasks in flight.
if parked_total > 0 then
  local candidates = redis.call('ZRANGEBYSCORE', host_ready, '-inf', now, 'LIMIT', 0,
    redis.call('ZCARD', active) + room + 16)
  for _, host in ipairs(candidates) do
    if #admitted >= room then break end
    local queue = host_queue_prefix .. host
    local blocked = host_blocked_until(host)
    local took = false
    while not blocked and #admitted < room do
      local raw = redis.call('LPOP', queue)
      if not raw then break end
      if beside_others and runs_alone(raw) then  -- its host's turn waits for the distributor
        redis.call('LPUSH', queue, raw)
        break
      end
      parked_delta = parked_delta - 1
      local task_id = cjson.decode(raw)['task_id']  -- checked before it was queued
      if not is_duplicate(task_id) then
        admit_task(raw, task_id, host)
        took = true
        blocked = host_blocked_until(host)
      end
    end
    if redis.call('LLEN', queue) == 0 then redis.call('ZREM', host_ready, host)
    elseif blocked and blocked > now then redis.call('ZADD', host_ready, blocked, host)
    elseif took then redis.call('ZADD', host_ready, now, host) end  -- behind the hosts already waiting
  end
end

-- Then intake. Outside host mode a task is admitted as it comes. In host mode the scan goes on past the room,
-- queueing tasks by host, so every host of a long intake is soon in host_ready and takes its turn.
local scanned = 0
local scan_limit = room * 4 + 16
local left_alone = {}  -- tasks that must run alone met by a refill's scan: back at intake's front afterwards
if host_mode then scan_limit = scan_limit + park_limit end
while scanned < scan_limit and (host_mode or #admitted < room) do
  local size = room - #admitted
  if host_mode then size = 100 end
  local batch = redis.call('LPOP', intake, math.min(size, scan_limit - scanned))
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
    elseif beside_others and message['run_alone'] == true then
      left_alone[#left_alone + 1] = raw
    elseif not is_duplicate(message['task_id']) then
      if not host_mode then
        admit_task(raw, message['task_id'], nil)
      else
        local host = host_of(message['url'])
        -- behind its host's queued tasks (a retry ahead of them), or queued while the host cannot take it
        if #admitted >= room or redis.call('ZSCORE', host_ready, host) or host_blocked_until(host) then
          park(raw, host, (tonumber(message['attempt']) or 0) > 0)
        else
          admit_task(raw, message['task_id'], host)
        end
      end
    end
  end
end

-- Everything is decided: now write (one command per task, never a bulk unpack).
for i = #left_alone, 1, -1 do redis.call('LPUSH', intake, left_alone[i]) end
if parked_delta ~= 0 then
  if redis.call('INCRBY', host_parked, parked_delta) <= 0 then redis.call('DEL', host_parked) end
end
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

-- When the next queued host may take a task: "-1" when none is known (a release wakes the distributor).
local host_wait = '-1'
if host_mode then
  local next_host = redis.call('ZRANGEBYSCORE', host_ready, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if next_host[2] then host_wait = string.format('%.6f', tonumber(next_host[2]) - now) end
end

if #admitted == 0 then
  if tonumber(redis.call('GET', host_parked) or '0') > 0 then return answer('host_limit', host_wait, malformed) end
  return answer('empty', '-1', malformed)
end

return answer('ok', host_wait, malformed, admitted, first_token)
