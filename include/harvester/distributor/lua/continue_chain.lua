-- continue_chain: a worker finished a page of a chain (an API whose next request is built from its response) and
-- would send the next request itself, in the same batch, instead of handing it to intake, admission and Celery.
-- Atomically: the parent's lease (held under its token, started) is released and counted done, and the child is
-- admitted and started under a fresh token in the same place, with exactly admission's checks (admit.lua): the
-- source and the child's host not paused, active within max_active, fetch starts in the rolling window under
-- per_minute, the host's tasks in flight under per_host_max_active, the child not already in flight. Else nothing
-- changes and the status says why: the worker then pushes the child to intake and releases the parent as usual.
-- The child's message is kept as its lease's message (active_messages), so a killed worker's chain resumes at
-- that request when the reaper hands it back (attempt + 1): the cursor is checkpointed with every page.
-- KEYS[1] active   KEYS[2] active_messages   KEYS[3] active_hosts   KEYS[4] host_active_counts   KEYS[5] counters
-- KEYS[6] config   KEYS[7] host_paused   KEYS[8] window   KEYS[9] paused_until   KEYS[10] leases   KEYS[11] worker_lost
-- KEYS[12] lent_places
-- ARGV[1] parent_id   ARGV[2] parent_token   ARGV[3] child_id   ARGV[4] child_message (JSON)
-- ARGV[5] lease_seconds (s)   ARGV[6] window_seconds (s, the rate window plus the margin)   ARGV[7] now (s) or ""
-- Returns {status, token (the child's fencing token, "" unless status is ok)}
-- status: ok | not_held | unregistered | paused | active_limit | rate_limit | host_limit | duplicate
local now = now_or_server(ARGV[7])
local parent, parent_token, child, raw = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local held, state = holds(KEYS[10], parent, parent_token)
if not held or state ~= 's' then return {'not_held', ''} end
local limits = redis.call('HMGET', KEYS[6], 'max_active', 'per_minute', 'per_host_max_active')
local max_active, per_minute = tonumber(limits[1]), tonumber(limits[2])
local per_host = tonumber(limits[3]) or 0
if not max_active or not per_minute then return {'unregistered', ''} end
if tonumber(redis.call('GET', KEYS[9]) or '0') > now then return {'paused', ''} end
local host = host_of(cjson.decode(raw)['url'])
if tonumber(redis.call('HGET', KEYS[7], host) or '0') > now then return {'paused', ''} end
if redis.call('ZSCORE', KEYS[1], child) then return {'duplicate', ''} end
-- the parent's place passes to the child: active stays as it is, so it must be within max_active already
if redis.call('ZCARD', KEYS[1]) - redis.call('ZCARD', KEYS[12]) > max_active then return {'active_limit', ''} end
redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now - tonumber(ARGV[6]))
if per_minute > 0 and redis.call('ZCARD', KEYS[8]) >= per_minute then return {'rate_limit', ''} end
local parent_host = redis.call('HGET', KEYS[3], parent)
if per_host > 0 then
  local taken = tonumber(redis.call('HGET', KEYS[4], host) or '0')
  if parent_host == host then taken = taken - 1 end
  if taken >= per_host then return {'host_limit', ''} end
end
drop_lease(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[12], parent)
redis.call('HDEL', KEYS[10], parent)
redis.call('HDEL', KEYS[11], parent)
redis.call('HINCRBY', KEYS[5], 'done', 1)
local token = string.format('%d', redis.call('HINCRBY', KEYS[5], 'leases', 1))
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), child)
redis.call('HSET', KEYS[2], child, raw)
redis.call('HSET', KEYS[10], child, 's|' .. token)
if per_host > 0 then
  redis.call('HSET', KEYS[3], child, host)
  redis.call('HINCRBY', KEYS[4], host, 1)
end
redis.call('HINCRBY', KEYS[5], 'admitted', 1)
redis.call('HINCRBY', KEYS[5], 'started', 1)
redis.call('HINCRBY', KEYS[5], 'chained', 1)
return {'ok', token}
