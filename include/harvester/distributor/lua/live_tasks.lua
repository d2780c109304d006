-- live_tasks: the ids of one run's tasks that Redis holds anywhere (intake, delayed retries, reservations
-- and leases), read in ONE atomic call so no task can move between two places while it is looked for
-- (a paged LRANGE of a moving intake misses tasks). The resume step calls it once per produce step.
-- KEYS[1] intake   KEYS[2] delayed   KEYS[3] active   KEYS[4] active_messages
-- KEYS[5] host_ready (hosts whose own queues hold tasks taken out of intake by admit.lua)
-- ARGV[1] run_id   ARGV[2] page (count of entries read per command inside the script)
-- ARGV[3] host_queue_prefix (a host's queue key is this prefix .. host)
-- Returns {task_ids... (ids of the run; leased ids without a message are included whatever their run)}
local needle = ARGV[1]  -- a cheap superset filter; matches are decoded and compared exactly
local page = tonumber(ARGV[2])
local found, seen = {}, {}
local function consider(raw)
  if string.find(raw, needle, 1, true) then
    local ok, message = pcall(cjson.decode, raw)
    if ok and type(message) == 'table' and message['run_id'] == ARGV[1] and type(message['task_id']) == 'string'
        and not seen[message['task_id']] then
      seen[message['task_id']] = true
      found[#found + 1] = message['task_id']
    end
  end
end
local length = redis.call('LLEN', KEYS[1])
for start = 0, length - 1, page do
  for _, raw in ipairs(redis.call('LRANGE', KEYS[1], start, start + page - 1)) do consider(raw) end
end
local delayed = redis.call('ZCARD', KEYS[2])
for start = 0, delayed - 1, page do
  for _, raw in ipairs(redis.call('ZRANGE', KEYS[2], start, start + page - 1)) do consider(raw) end
end
local hosts = redis.call('ZCARD', KEYS[5])
for start = 0, hosts - 1, page do
  for _, host in ipairs(redis.call('ZRANGE', KEYS[5], start, start + page - 1)) do
    local queue = ARGV[3] .. host
    local queued = redis.call('LLEN', queue)
    for from = 0, queued - 1, page do
      for _, raw in ipairs(redis.call('LRANGE', queue, from, from + page - 1)) do consider(raw) end
    end
  end
end
local active = redis.call('ZCARD', KEYS[3])
for start = 0, active - 1, page do
  for _, task_id in ipairs(redis.call('ZRANGE', KEYS[3], start, start + page - 1)) do
    local raw = redis.call('HGET', KEYS[4], task_id)
    if raw then consider(raw)
    elseif not seen[task_id] then seen[task_id] = true; found[#found + 1] = task_id end
  end
end
return found
