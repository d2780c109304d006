-- proxy_tier_choose: the proxy tier a source's requests to one site host take now: the cheapest it has not blocked
-- us on within that tier's quiet period (proxy_tier_block), else the top one. A host that never blocked stays on
-- tier 0 and writes nothing. Times: Redis TIME (s).
-- KEYS[1] proxy_tiers (hash, see PageSlotKeys.proxy_tiers)
-- ARGV[1] host (the site host)   ARGV[2] tiers (count)   ARGV[3] keep_seconds (s: the hash expires this long after
-- a move)
-- Returns {tier (index, 0 the cheapest), down_in (s until the tier below is quiet again; 0 on tier 0)}
local key, host, count, keep = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = server_now()
local was = redis.call('HGET', key, host .. '|tier')
local tier = proxy_tier_now(key, host, count, now)
if tostring(tier) ~= (was or '0') then redis.call('EXPIRE', key, math.ceil(keep)) end
local down_in = 0
if tier > 0 then
  down_in = math.max(0, tonumber(redis.call('HGET', key, host .. '|hot:' .. (tier - 1)) or '0') - now)
end
return {tier, fmt(down_in)}
