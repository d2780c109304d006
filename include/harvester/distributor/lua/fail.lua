-- fail: a task failed. Free its lease, then retry it after a delay or, past the source's retries, dead-letter it.
-- Only the holder of the lease decides (compare on the fencing token): a stale holder whose task was
-- reaped and handed to another worker changes nothing, and is counted.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] config   KEYS[7] delayed   KEYS[8] dead_letters   KEYS[9] run_dead   KEYS[10] host_paused
-- KEYS[11] leases   KEYS[12] worker_lost   KEYS[13] lent_places
-- ARGV[1] task_id   ARGV[2] next_attempt (count)   ARGV[3] retry_message (JSON, attempt already raised)
-- ARGV[4] original_message (JSON)   ARGV[5] reason   ARGV[6] delay_seconds (s)   ARGV[7] now (s) or ""
-- ARGV[8] host   ARGV[9] pause_host_seconds (s to pause the host for, 0 = no pause)   ARGV[10] token
-- ARGV[11] dead_letters_max (count kept per source)   ARGV[12] host_pause_max_seconds (s, the pauses' expiry)
-- Returns {outcome, due (s)}: outcome "retry" | "dead" | "no_lease"
local now = now_or_server(ARGV[7])
if not holds(KEYS[11], ARGV[1], ARGV[10]) then
  redis.call('HINCRBY', KEYS[5], 'stale', 1)
  return {'no_lease', '0'}
end
drop_lease(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[13], ARGV[1])
redis.call('HDEL', KEYS[11], ARGV[1])
local pause_for = tonumber(ARGV[9])
if pause_for > 0 and ARGV[8] ~= '' then
  pause_for = math.min(pause_for, tonumber(ARGV[12]))
  local until_time = now + pause_for
  local current = tonumber(redis.call('HGET', KEYS[10], ARGV[8]) or '0')
  if until_time > current then redis.call('HSET', KEYS[10], ARGV[8], string.format('%.6f', until_time)) end
  redis.call('PEXPIRE', KEYS[10], math.ceil(tonumber(ARGV[12]) * 1000) + 1000)
end
redis.call('HINCRBY', KEYS[5], 'failed', 1)
local retries = tonumber(redis.call('HGET', KEYS[6], 'retries') or '3')
if tonumber(ARGV[2]) > retries then
  redis.call('HDEL', KEYS[12], ARGV[1])
  push_dead(KEYS[8], KEYS[5], KEYS[9], dead_entry(ARGV[4], ARGV[5], now), cjson.decode(ARGV[4]), tonumber(ARGV[11]))
  return {'dead', '0'}
end
local due = now + tonumber(ARGV[6])
redis.call('ZADD', KEYS[7], due, ARGV[3])
redis.call('HINCRBY', KEYS[5], 'retried', 1)
return {'retry', string.format('%.6f', due)}
