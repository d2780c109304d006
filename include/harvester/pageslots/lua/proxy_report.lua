-- proxy_report: how one connection through a proxy went. A success clears its consecutive failures and brings
-- it back; the failures_allowed-th consecutive connect or upstream failure takes it out for
-- base * 2^(failures - failures_allowed) seconds (capped at max), scaled by 0.75..1.25 by the caller's draw.
-- KEYS[1] proxy_health (hash, see PageSlotKeys.proxy_health)
-- ARGV[1] proxy (connection id)   ARGV[2] outcome ('ok' or 'failure')   ARGV[3] failures_allowed (count)
-- ARGV[4] base_seconds (s)   ARGV[5] max_seconds (s)   ARGV[6] jitter (0..1, the caller's random draw)
-- Returns {state ('in' or 'out'), failures (consecutive), out_for (s, 0 when in)}
local health = KEYS[1]
local proxy, outcome = ARGV[1], ARGV[2]
local allowed, base, cap, jitter = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = server_now()
redis.call('HINCRBY', health, proxy .. '|requests', 1)
if outcome == 'ok' then
  redis.call('HSET', health, proxy .. '|failures', 0, proxy .. '|out_until', 0)
  return {'in', 0, '0'}
end
redis.call('HINCRBY', health, proxy .. '|errors', 1)
local failures = redis.call('HINCRBY', health, proxy .. '|failures', 1)
if failures < allowed then return {'in', failures, '0'} end
local out_for = math.min(cap, base * 2 ^ (failures - allowed)) * (0.75 + 0.5 * jitter)
redis.call('HSET', health, proxy .. '|out_until', fmt(now + out_for))
return {'out', failures, fmt(out_for)}
