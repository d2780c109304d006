-- proxy_tier_block: a site host blocked one of a source's requests on a proxy tier (a 401, 403 or 429, or a block
-- page). That tier goes above the host for quiet_seconds, doubled for each block that starts a new episode within
-- twice its last period (a host that blocks us again as soon as we come down stays up longer), at most
-- 2^max_doublings times; blocks while the tier is already above the host (pages that were in flight) are counted
-- but change nothing. The host's tier then follows (proxy_tier_choose's rule). Times: Redis TIME (s).
-- KEYS[1] proxy_tiers (hash, see PageSlotKeys.proxy_tiers)
-- ARGV[1] host (the site host)   ARGV[2] tier (index of the tier the block came through)   ARGV[3] tiers (count)
-- ARGV[4] quiet_seconds (s)   ARGV[5] max_doublings (count)   ARGV[6] keep_seconds (s: the hash expires this long
-- after the last block)
-- Returns {tier (index now), quiet_for (s the blocked tier stays above the host), strikes (its episodes in a row)}
local key, host = KEYS[1], ARGV[1]
local blocked, count, quiet = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local doublings, keep = tonumber(ARGV[5]), tonumber(ARGV[6])
local now = server_now()
local hot_field, strikes_field = host .. '|hot:' .. blocked, host .. '|strikes:' .. blocked
local hot = tonumber(redis.call('HGET', key, hot_field) or '0')
local strikes = tonumber(redis.call('HGET', key, strikes_field) or '0')
redis.call('HINCRBY', key, host .. '|blocks:' .. blocked, 1)
if hot <= now then
  if strikes > 0 and now - hot > 2 * quiet * 2 ^ math.min(strikes - 1, doublings) then strikes = 0 end
  strikes = strikes + 1
  hot = now + quiet * 2 ^ math.min(strikes - 1, doublings)
  redis.call('HSET', key, hot_field, fmt(hot), strikes_field, strikes)
end
local tier = proxy_tier_now(key, host, count, now)
redis.call('EXPIRE', key, math.ceil(keep))
return {tier, fmt(hot - now), strikes}
