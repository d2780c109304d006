-- reap: reservations and leases past their deadline. A STARTED task whose lease expired (its worker died or
-- hangs) goes back to intake with attempt + 1, or, past the source's retries, to dead letters; so does at once
-- a started request not safe_to_repeat (reason unsafe_to_retry: it may have reached the site). A task that
-- was never started (admitted but not confirmed published: its distributor died; or queued so long its
-- message must be lost) goes back to intake uncharged: it has not run. Also promotes retries that are due.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] config   KEYS[7] intake   KEYS[8] dead_letters   KEYS[9] run_dead   KEYS[10] delayed
-- KEYS[11] leases   KEYS[12] worker_lost   KEYS[13] lent_places
-- ARGV[1] now (s) or ""   ARGV[2] limit (count: at most this many leases)   ARGV[3] dead_letters_max (count)
-- Returns {reaped (count of started leases), returned (count of unstarted reservations), dead_entries...}
local now = now_or_server(ARGV[1])
promote_due(KEYS[10], KEYS[7], now, 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
if #expired == 0 then return {0, 0} end
local retries = tonumber(redis.call('HGET', KEYS[6], 'retries') or '3')
local dead_cap = tonumber(ARGV[3])
local reply = {0, 0}
local reaped, returned = 0, 0
for _, task_id in ipairs(expired) do
  local raw = redis.call('HGET', KEYS[2], task_id)
  local state = lease_of(KEYS[11], task_id)
  drop_lease(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[13], task_id)
  redis.call('HDEL', KEYS[11], task_id)
  if raw and state ~= nil and state ~= 's' then
    redis.call('LPUSH', KEYS[7], raw)  -- never started: the same attempt again
    returned = returned + 1
  elseif raw then
    reaped = reaped + 1
    local message = cjson.decode(raw)
    local attempt = (tonumber(message['attempt']) or 0) + 1
    local unsafe = unsafe_to_repeat(message)
    if attempt > retries or unsafe then
      local reason = 'lease expired: no worker finished the task (attempt '
        .. string.format('%d', attempt) .. ' of ' .. string.format('%d', retries + 1) .. ')'
      if unsafe then
        reason = UNSAFE_TO_RETRY .. ' (lease expired)'
        redis.call('HINCRBY', KEYS[5], 'unsafe_to_retry', 1)
      end
      local entry = dead_entry(raw, reason, now)
      push_dead(KEYS[8], KEYS[5], KEYS[9], entry, message, dead_cap)
      redis.call('HINCRBY', KEYS[5], 'failed', 1)
      redis.call('HDEL', KEYS[12], task_id)
      reply[#reply + 1] = entry
    else
      message['attempt'] = attempt
      redis.call('LPUSH', KEYS[7], cjson.encode(message))
      redis.call('HINCRBY', KEYS[5], 'reaped', 1)
    end
  end
end
if returned > 0 then redis.call('HINCRBY', KEYS[5], 'returned_unstarted', returned) end
reply[1] = reaped
reply[2] = returned
return reply
