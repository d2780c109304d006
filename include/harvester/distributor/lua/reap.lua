-- reap: leases past their deadline (the worker died or hangs) go back to intake with attempt + 1,
-- or, past the source's retries, to dead letters. Also promotes retries whose delay is over.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] config   KEYS[7] intake   KEYS[8] dead_letters   KEYS[9] run_dead   KEYS[10] delayed
-- ARGV[1] now (s) or ""   ARGV[2] limit (count: at most this many leases)
-- Returns {reaped (count), dead_entries... (the dead-letter entries created)}
local now = now_or_server(ARGV[1])
promote_due(KEYS[10], KEYS[7], now, 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
if #expired == 0 then return {0} end
local retries = tonumber(redis.call('HGET', KEYS[6], 'retries') or '3')
local reply = {0}
local reaped = 0
for _, task_id in ipairs(expired) do
  local raw = redis.call('HGET', KEYS[2], task_id)
  drop_lease(KEYS[1], KEYS[2], KEYS[3], KEYS[4], task_id)
  reaped = reaped + 1
  if raw then
    local message = cjson.decode(raw)
    local attempt = (tonumber(message['attempt']) or 0) + 1
    if attempt > retries then
      local entry = dead_entry(raw, 'lease expired: no worker finished the task (attempt '
        .. string.format('%d', attempt) .. ' of ' .. string.format('%d', retries + 1) .. ')', now)
      redis.call('RPUSH', KEYS[8], entry)
      redis.call('HINCRBY', KEYS[5], 'dead', 1)
      redis.call('HINCRBY', KEYS[5], 'failed', 1)
      count_dead_for_run(KEYS[9], message)
      reply[#reply + 1] = entry
    else
      message['attempt'] = attempt
      redis.call('LPUSH', KEYS[7], cjson.encode(message))
      redis.call('HINCRBY', KEYS[5], 'reaped', 1)
    end
  end
end
reply[1] = reaped
return reply
